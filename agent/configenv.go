package agent

// EnvPrefix starts the environment variables that override the
// configuration file: EDGE_AGENT_ and the key path in upper case with
// "_" for ".", as EDGE_AGENT_CENTRAL_URL for central.url.
const EnvPrefix = "EDGE_AGENT_"
