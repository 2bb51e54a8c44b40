package storeurl_test

import (
	"strings"
	"testing"

	"github.com/limitkit/limitkit/backend/storeurl"
)

// maxFuzzError bounds an error's length: errors quote what they name
// shortened, never a whole large input.
const maxFuzzError = 2048

// urlPassword is the password in rawURL's userinfo (between "://" and the
// last '@' before the path, after the first ':'), or "".
func urlPassword(rawURL string) string {
	_, after, ok := strings.Cut(rawURL, "://")
	if !ok {
		return ""
	}
	if i := strings.IndexAny(after, "/?#"); i >= 0 && strings.LastIndex(after[:i], "@") < 0 {
		return ""
	}
	at := strings.LastIndex(after, "@")
	if at < 0 {
		return ""
	}
	_, pass, _ := strings.Cut(after[:at], ":")
	return pass
}

// secret reports whether s is a secret a test can look for: long enough
// not to occur by chance in a message, and nowhere else in rawURL.
func secret(s, rawURL string, occurrences int) bool {
	return len(s) >= 8 && strings.Count(rawURL, s) <= occurrences && !strings.ContainsAny(s, "%")
}

// errorOf is Parse's error text for rawURL and password, "" when none.
func errorOf(rawURL, password string) string {
	if _, err := storeurl.Parse(rawURL, storeurl.WithPassword(password)); err != nil {
		return err.Error()
	}
	return ""
}

// other is a password of s's length that is not s.
func other(s string) string {
	o := strings.Repeat("q", len(s))
	if o == s {
		o = strings.Repeat("z", len(s))
	}
	return o
}

// FuzzParse: Parse of any URL, with a password given as an option, fails
// or not without a panic; its error is short and holds neither the URL's
// password nor the option's; RedactURL hides the URL's password too.
func FuzzParse(f *testing.F) {
	for _, u := range []string{
		"memory://", "memory://?max_keys=100000",
		"redis://localhost:6379/0", "redis://user:s3cretpassw0rd@localhost:6379/2",
		"rediss://:hunter2hunter2@h:6380?tls_server_name=x&tls_insecure_skip_verify=true",
		"rediss://h:1?tls_ca=/nonexistent/ca.pem&tls_cert=/nonexistent/c.pem&tls_key=/nonexistent/k.pem",
		"redis+cluster://a:1?addr=b:2&addr=c:3", "rediss+cluster://u:p4ssw0rd-long@a:1?addr=b:2",
		"redis+sentinel://s1:26379/0?addr=s2:26379&master_name=mymaster&password=masterpassw0rd",
		"redis://a:b@c@d:1", "redis://%zz:pass%word@h:1", "redis://[::1]:6379", "redis:///x", "://@",
		"REDIS://H:1?dial_timeout=5s&pool_size=-1&client=rueidis",
	} {
		f.Add(u, "optionpassw0rd")
	}
	f.Fuzz(func(t *testing.T, rawURL, password string) {
		_, err := storeurl.Parse(rawURL, storeurl.WithPassword(password))
		urlPass := urlPassword(rawURL)
		if red := storeurl.RedactURL(rawURL); urlPass != "" && secret(urlPass, rawURL, 1) && strings.Contains(red, urlPass) {
			t.Fatalf("RedactURL(%q) = %q holds the password", rawURL, red)
		}
		if err == nil {
			return
		}
		msg := err.Error()
		if len(msg) > maxFuzzError {
			t.Fatalf("error of %d bytes: %.200s", len(msg), msg)
		}
		// A leak is a password more often in the error than in the error
		// of the same input with another password of its length: the
		// messages' own words ("user:password@") are no leak.
		if secret(password, rawURL, 0) && strings.Count(msg, password) > strings.Count(errorOf(rawURL, other(password)), password) {
			t.Fatalf("the option's password %q is in the error: %s", password, msg)
		}
		if urlPass != "" && secret(urlPass, rawURL, 1) &&
			strings.Count(msg, urlPass) > strings.Count(errorOf(strings.Replace(rawURL, urlPass, other(urlPass), 1), password), urlPass) {
			t.Fatalf("the URL's password %q is in the error: %s", urlPass, msg)
		}
	})
}
