package flight

// Foxglove's JSON schema of foxglove.LocationFix, as the Foxglove SDK
// publishes it (video is protobuf: video.go).
const (
	schemaLocationFix = `{"title":"foxglove.LocationFix","description":"A navigation satellite fix for any Global Navigation Satellite System","type":"object","properties":{` +
		`"timestamp":{"type":"object","title":"time","properties":{"sec":{"type":"integer","minimum":0},"nsec":{"type":"integer","minimum":0,"maximum":999999999}},"description":"Timestamp of the message"},` +
		`"frame_id":{"type":"string","description":"Frame for the sensor."},` +
		`"latitude":{"type":"number","description":"Latitude in degrees"},` +
		`"longitude":{"type":"number","description":"Longitude in degrees"},` +
		`"altitude":{"type":"number","description":"Altitude in meters"},` +
		`"position_covariance":{"type":"array","items":{"type":"number"},"minItems":9,"maxItems":9,"description":"Position covariance (m^2) defined relative to a tangential plane through the reported position."},` +
		`"position_covariance_type":{"title":"foxglove.PositionCovarianceType","description":"If position_covariance is available, position_covariance_type must be set to indicate the type of covariance.","oneOf":[{"title":"UNKNOWN","const":0},{"title":"APPROXIMATED","const":1},{"title":"DIAGONAL_KNOWN","const":2},{"title":"KNOWN","const":3}]}}}`
	// schemaObject is the schema of the JSON channels whose messages are
	// what the drone or agent sent (telemetry, health).
	schemaObject = `{"type":"object"}`
	schemaEntry  = `{"title":"edge.flight.Entry","description":"One event of the record: where the centre holds it and the SHA-256 of its payload (docs/flight.md)","type":"object"}`
	schemaGap    = `{"title":"edge.flight.Gap","description":"A gap marker: events the record cannot hold, and why (docs/flight.md)","type":"object"}`
)
