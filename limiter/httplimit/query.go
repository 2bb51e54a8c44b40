package httplimit

import (
	"net/http"
	"strings"
)

// Query keys requests by the first value of the named URL query
// parameter, such as "api_key" in /items?api_key=k-123, trimmed of
// spaces. A missing or blank parameter gives no key. The key is not a
// client address, whatever it holds. Prefer Header where clients can send
// one: a key in the URL ends up in access logs and browser histories.
func Query(name string) KeyFunc {
	return func(r *http.Request) Key {
		if r.URL == nil {
			return Key{}
		}
		return Key{Value: strings.TrimSpace(r.URL.Query().Get(name))}
	}
}
