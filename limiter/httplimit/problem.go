package httplimit

import (
	"encoding/json"
	"strconv"
	"strings"
)

// QuotaExceeded is the problem type (RFC 9457) of a denial, as the RateLimit
// header draft (draft-ietf-httpapi-ratelimit-headers-11, section 5.1)
// defines it. Its extension member "violated-policies" lists the names of
// the policies whose quota was exceeded.
const QuotaExceeded = "https://iana.org/assignments/http-problem-types#quota-exceeded"

// problemHead returns a denial's problem+json body for the policy name, up
// to the value of "detail", which the handler appends with the closing
// brace: everything else is fixed, so nothing is encoded per request.
func problemHead(policy string) string {
	name, _ := json.Marshal(policy) // a string always marshals
	return `{"type":"` + QuotaExceeded + `","title":"Quota Exceeded","status":429,"violated-policies":[` +
		string(name) + `],"detail":`
}

// acceptsJSON reports whether an Accept header (RFC 9110, section 12.5.1)
// prefers JSON to plain text: a JSON media range (application/problem+json,
// application/json or application/*) with a q above 0 and at least that of
// the best text range (text/plain, text/* or */*). "*/*" alone, what curl
// and browsers send, keeps the text body of earlier versions.
func acceptsJSON(values []string) bool {
	var qJSON, qText float64
	for _, v := range values {
		for _, elem := range strings.Split(v, ",") {
			mt, params, _ := strings.Cut(elem, ";")
			q, ok := qValue(params)
			if !ok {
				continue
			}
			switch strings.ToLower(strings.TrimSpace(mt)) {
			case "application/problem+json", "application/json", "application/*":
				qJSON = max(qJSON, q)
			case "text/plain", "text/*", "*/*":
				qText = max(qText, q)
			}
		}
	}
	return qJSON > 0 && qJSON >= qText
}

// qValue returns the q parameter among a media range's parameters (1 when
// absent), and false when it does not parse.
func qValue(params string) (float64, bool) {
	for p := range strings.SplitSeq(params, ";") {
		name, val, _ := strings.Cut(p, "=")
		if !strings.EqualFold(strings.TrimSpace(name), "q") {
			continue
		}
		q, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil || q < 0 || q > 1 {
			return 0, false
		}
		return q, true
	}
	return 1, true
}
