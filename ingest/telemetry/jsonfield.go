package telemetry

import (
	"bytes"
	"encoding/json"
)

// objectField returns the raw JSON value of key in the object obj, without
// decoding the rest: a hand-rolled scan that is several times cheaper than
// json.Unmarshal into a map (which was the agent's largest CPU cost per
// message). obj must already be valid JSON (json.Valid); anything else
// returns false. Keys with escapes are compared after unescaping; of
// duplicate keys the last wins, as with encoding/json.
func objectField(obj []byte, key string) ([]byte, bool) {
	i := skipWS(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return nil, false
	}
	i++
	var found []byte
	for {
		i = skipWS(obj, i)
		if i < len(obj) && obj[i] == '}' {
			return found, found != nil
		}
		if i >= len(obj) || obj[i] != '"' {
			return nil, false
		}
		keyEnd := skipString(obj, i)
		if keyEnd < 0 {
			return nil, false
		}
		match := keyEquals(obj[i:keyEnd], key)
		i = skipWS(obj, keyEnd)
		if i >= len(obj) || obj[i] != ':' {
			return nil, false
		}
		i = skipWS(obj, i+1)
		end := skipValue(obj, i)
		if end < 0 {
			return nil, false
		}
		if match {
			found = obj[i:end]
		}
		i = skipWS(obj, end)
		if i < len(obj) && obj[i] == '}' {
			return found, found != nil
		}
		if i >= len(obj) || obj[i] != ',' {
			return nil, false
		}
		i++
	}
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i] == '"', or -1.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// skipValue returns the index after the value starting at b[i], or -1.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = skipString(b, j)
				if j < 0 {
					return -1
				}
				j--
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	j := i
	for ; j < len(b); j++ {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return j
		}
	}
	return j
}

// keyEquals compares a quoted JSON key with key.
func keyEquals(quoted []byte, key string) bool {
	inner := quoted[1 : len(quoted)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner) == key
	}
	var s string
	return json.Unmarshal(quoted, &s) == nil && s == key
}
