package storeurl

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// redacted stands for a URL's userinfo in anything this package prints.
const redacted = "xxxxx"

// splitURL cuts a URL at its userinfo without parsing it: the userinfo is
// everything between "://" and the last '@', so that an unescaped '/', '?',
// '#' or '@' in a password still counts as password, never as host or
// path. hasUser reports whether there is an '@'.
func splitURL(raw string) (scheme, userinfo, rest string, hasUser bool) {
	i := strings.Index(raw, "://")
	if i < 0 {
		return "", "", raw, false
	}
	scheme, after := raw[:i], raw[i+3:]
	at := strings.LastIndexByte(after, '@')
	if at < 0 {
		return scheme, "", after, false
	}
	return scheme, after[:at], after[at+1:], true
}

// RedactURL returns rawURL with its userinfo (user name and password)
// replaced by "xxxxx", for logs and error messages. It does not parse the
// URL, so it redacts whatever a malformed URL holds before its last '@'.
func RedactURL(rawURL string) string {
	scheme, _, rest, hasUser := splitURL(rawURL)
	switch {
	case hasUser:
		return scheme + "://" + redacted + "@" + rest
	case scheme == "" && strings.Contains(rawURL, "@"):
		// No "://": nothing can be told apart; show none of it.
		return redacted
	}
	return rawURL
}

// checkUserinfo says what is wrong with a URL's userinfo, never quoting
// it: each character must be one RFC 3986 allows there (letters, digits,
// "-._~!$&'()*+,;=:@") or a %XX escape.
func checkUserinfo(u string) error {
	for i := 0; i < len(u); i++ {
		c := u[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9',
			strings.IndexByte("-._~!$&'()*+,;=:@", c) >= 0:
		case c == '%':
			if i+2 >= len(u) || !isHex(u[i+1]) || !isHex(u[i+2]) {
				return errors.New("the user name or password holds a '%' not followed by two hex digits; write '%' as %25")
			}
			i += 2
		case c == '/' || c == '?' || c == '#':
			return fmt.Errorf("the part before the last '@' holds an unescaped %q: percent-encode it in the password as %%%02X "+
				"(or, if the '@' belongs to an option's value, write that '@' as %%40)", c, c)
		default:
			return errors.New("the user name or password holds a character URLs do not allow there (a space, quote, bracket, " +
				"'\\', '^', '|' or a non-ASCII byte); percent-encode every character that is not a letter, digit or \"-._~\"")
		}
	}
	return nil
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// parseURL parses raw, checking its userinfo first so that no error can
// repeat any of it: errors of net/url are produced from the redacted URL.
func parseURL(raw string) (*url.URL, error) {
	scheme, userinfo, _, hasUser := splitURL(raw)
	if scheme == "" {
		if strings.Contains(raw, "@") {
			return nil, errors.New(`the URL has no "://" after its scheme; write scheme://[user:password@]host:port, such as redis://:PASSWORD@host:6379/0`)
		}
	}
	if hasUser {
		if err := checkUserinfo(userinfo); err != nil {
			return nil, err
		}
	}
	if _, err := url.Parse(RedactURL(raw)); err != nil {
		return nil, fmt.Errorf("not a URL: %w", parseError(err))
	}
	u, err := url.Parse(raw)
	if err != nil {
		// The redacted URL parsed, so the userinfo is at fault; say no more.
		return nil, errors.New("not a URL: the user name or password cannot be read; percent-encode every character that is not a letter, digit or \"-._~\"")
	}
	return u, nil
}

// parseError restates an error of url.Parse without the parts of the URL
// it quotes: a URL that lost its '@' has its password where the port goes.
func parseError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var (
		host   url.InvalidHostError
		escape url.EscapeError
	)
	switch msg := err.Error(); {
	case errors.As(err, &host):
		return errors.New("the host holds a character host names cannot; write host:port (a password goes before an '@')")
	case errors.As(err, &escape):
		return errors.New("a '%' is not followed by two hex digits; write '%' as %25")
	case strings.HasPrefix(msg, "invalid port"):
		return errors.New("the port is not a number; write host:port, with the password before an '@': redis://:PASSWORD@host:port")
	case strings.ContainsAny(msg, "\"'"):
		return errors.New("the URL cannot be read; write scheme://[user:password@]host:port/db")
	}
	return err
}

// userinfo returns u's user name and password, which the client parsers
// never see (and so never echo).
func userinfo(u *url.URL) (user, password string) {
	if u.User != nil {
		user = u.User.Username()
		password, _ = u.User.Password()
	}
	return user, password
}

// secretsOf lists what of u must never be printed: the userinfo, raw and
// decoded, and the values of query options that hold passwords.
func secretsOf(raw string, u *url.URL) []string {
	var s []string
	if _, userinfo, _, ok := splitURL(raw); ok {
		s = append(s, userinfo)
	}
	if u != nil {
		if u.User != nil {
			s = append(s, u.User.Username())
			if p, ok := u.User.Password(); ok {
				s = append(s, p)
			}
		}
		for k, vs := range u.Query() {
			if strings.Contains(strings.ToLower(k), "password") || strings.Contains(strings.ToLower(k), "user") {
				s = append(s, vs...)
			}
		}
	}
	return s
}

// scrubbed returns err's message with every secret of at least 3 bytes
// replaced: a last guard over messages of client libraries. It does not
// wrap err, whose own message would still hold the secret.
func scrubbed(err error, secrets []string) error {
	msg := err.Error()
	hit := false
	for _, s := range secrets {
		if len(s) >= 3 && strings.Contains(msg, s) {
			msg = strings.ReplaceAll(msg, s, redacted)
			hit = true
		}
	}
	if !hit {
		return err
	}
	return errors.New(msg)
}

// clip bounds s for an error message.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
