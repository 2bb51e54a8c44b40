package config

import (
	"context"
	"encoding/json"

	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The secret pieces of the passwords below: none may appear in any error.
var secretPieces = []string{"Sup3r", "S3cretPW", "Xy9Qw7"}

// malformedURLs are Redis URLs with secrets in their userinfo (or, for a
// sentinel, in the master's password option), well formed or not. H is
// replaced by an address nobody listens on.
var malformedURLs = []string{
	"redis://:p@ss/Sup3rS3cretPW@H/0", // the example
	"redis://:Sup3r/S3cretPW@H/0",
	"redis://:Sup3r?S3cretPW@H/0",
	"redis://:Sup3r#S3cretPW@H/0",
	"redis://:Sup3r:S3cretPW@H/0",
	"redis://Xy9Qw7:Sup3rS3cretPW@H/0",
	"redis://Xy9Qw7@H/0",
	"redis://:Sup3r%zzS3cretPW@H/0",
	"redis://:Sup3r%S3cretPW@H/0",
	"redis://:Sup3r%2FS3cretPW@H/0",
	"redis://:Sup3r S3cretPW@H/0",
	`redis://:Sup3r"S3cretPW@H/0`,
	"redis://:Sup3r\x01S3cretPW@H/0",
	"redis://:Sup3r@S3cretPW@H/0",
	"redis://Xy9Qw7/x:Sup3rS3cretPW@H/0",
	"redis://:Sup3rS3cretPW@H/x",
	"redis://:Sup3rS3cretPW@H/0/extra",
	"redis://:Sup3rS3cretPW@H/0?bogus=1",
	"redis://:Sup3rS3cretPW@H/0?db=x",
	"redis://:Sup3rS3cretPW@H/0?dial_timeout=zz",
	"redis://:Sup3rS3cretPW@[::1",
	"redis://:Sup3rS3cretPW@127.0.0.1:notaport/0",
	"redis://:Sup3rS3cretPW",
	"redis:/:Sup3rS3cretPW@H/0",
	"redis::Sup3rS3cretPW@H/0",
	"redis:Sup3rS3cretPW@H/0",
	" redis://:Sup3rS3cretPW@H/0",
	"rediss://:Sup3r/S3cretPW@H/0",
	"http://:Sup3rS3cretPW@H/",
	"memory://:Sup3rS3cretPW@/",
	"redis+sentinel://:Sup3r/S3cretPW@H?master_name=m",
	"redis+sentinel://:Sup3rS3cretPW@H",
	"redis+sentinel://:Sup3rS3cretPW@H?master_name=m&dial_timeout=zz",
	"redis+sentinel://H?master_name=m&password=Sup3rS3cretPW&bogus=1",
	"redis+sentinel://H?master_name=m&password=Sup3r@S3cretPW",
	"redis+cluster://:Sup3r/S3cretPW@H?addr=H",
	"redis+cluster://:Sup3rS3cretPW@H?addr=H&bogus=1",
	"redis+cluster://:Sup3rS3cretPW@H?addr=%zz",
	"rediss+cluster://Xy9Qw7:Sup3r#S3cretPW@H?addr=H",
}

// messages returns the message of err and of every error it wraps.
func messages(err error) []string {
	if err == nil {
		return nil
	}
	out := []string{err.Error()}
	switch e := err.(type) {
	case interface{ Unwrap() error }:
		out = append(out, messages(e.Unwrap())...)
	case interface{ Unwrap() []error }:
		for _, w := range e.Unwrap() {
			out = append(out, messages(w)...)
		}
	}
	return out
}

func requireNoSecret(t *testing.T, what string, err error) {
	t.Helper()
	for _, msg := range messages(err) {
		for _, s := range secretPieces {
			require.NotContains(t, msg, s, "%s: the error holds a piece of the password", what)
		}
	}
}

// TestNoErrorHoldsTheUserinfo: over many malformed URLs and both clients,
// no error of Parse, Load, Backend.Open or (for the URLs that parse)
// Build and the first decision holds any piece of the
// password. On the code before the fix it fails: the client parsers echo
// the URL's path, which holds the password's tail.
func TestNoErrorHoldsTheUserinfo(t *testing.T) {
	addr := refusedAddr(t)
	ctx := context.Background()
	parsed := 0
	for _, raw := range malformedURLs {
		u := strings.ReplaceAll(raw, "H", addr)
		for _, client := range []string{GoRedis, Rueidis} {
			name := fmt.Sprintf("%q %s", raw, client)
			q, err := json.Marshal(u)
			require.NoError(t, err)
			file := fmt.Sprintf(`{"backend": {"url": %s, "client": %q}, "policies": {"a": {"limit": 1, "window": "1s"}}}`, q, client)
			cfg, perr := Parse([]byte(file), JSON)
			requireNoSecret(t, name+" Parse", perr)
			_, err = Load(writeFile(t, "limits.json", file))
			requireNoSecret(t, name+" Load", err)
			_, _, err = Backend{URL: u, Client: client}.Open(ctx)
			requireNoSecret(t, name+" Open", err)
			if perr != nil {
				continue
			}
			parsed++
			set, err := cfg.Build(ctx)
			requireNoSecret(t, name+" Build", err)
			if err != nil {
				continue
			}
			dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = set.Limiter("a").Allow(dctx, "k")
			cancel()
			require.Error(t, err, name)
			requireNoSecret(t, name+" Allow", err)
			require.NoError(t, set.Close())
		}
	}
	require.Positive(t, parsed, "some URLs must parse, so that Build and Allow are checked too")
}

// TestMalformedURLErrorsSayWhatToChange: an unescaped delimiter in the
// password is named, with its escape.
func TestMalformedURLErrorsSayWhatToChange(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://:p@ss/Sup3rS3cretPW@127.0.0.1:6379/0": `unescaped '/': percent-encode it in the password as %2F`,
		"redis://:Sup3r?S3cretPW@127.0.0.1:6379/0":     `unescaped '?': percent-encode it in the password as %3F`,
		"redis://:Sup3r#S3cretPW@127.0.0.1:6379/0":     `unescaped '#': percent-encode it in the password as %23`,
		"redis://:Sup3r%zzS3cretPW@127.0.0.1:6379/0":   `'%' not followed by two hex digits; write '%' as %25`,
		"redis://:Sup3r S3cretPW@127.0.0.1:6379/0":     `percent-encode every character that is not a letter, digit or "-._~"`,
		"redis:/:Sup3rS3cretPW@127.0.0.1:6379/0":       `no "://" after its scheme`,
	} {
		_, _, err := Backend{URL: raw}.Open(context.Background())
		require.ErrorContains(t, err, want, raw)
		requireNoSecret(t, raw, err)
	}
	// Well-formed escapes and '@' and ':' in the password still work.
	for _, raw := range []string{"redis://:Sup3r%2FS3cretPW@127.0.0.1:6379/0", "redis://u:Sup3r@S3cret:PW@127.0.0.1:6379/0"} {
		_, err := Parse([]byte(`{"backend": {"url": "`+raw+`"}, "policies": {"a": {"limit": 1, "window": "1s"}}}`), JSON)
		require.NoError(t, err, raw)
	}
}

// TestPrintedConfigHidesThePassword: a Config printed with any verb, as a
// log line would, holds no piece of the password.
func TestPrintedConfigHidesThePassword(t *testing.T) {
	cfg := &Config{Backend: Backend{URL: "redis://Xy9Qw7:Sup3rS3cretPW@127.0.0.1:6379/0", Fallback: &Fallback{Timeout: time.Second}},
		Policies: []Policy{{Name: "a"}}}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		for _, v := range []any{cfg, *cfg, cfg.Backend} {
			out := fmt.Sprintf(verb, v)
			require.Contains(t, out, "127.0.0.1:6379", "the rest of the URL is kept")
			for _, s := range secretPieces {
				require.NotContains(t, out, s, verb)
			}
		}
	}
}
