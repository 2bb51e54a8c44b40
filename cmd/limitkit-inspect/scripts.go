package main

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/limitkit/limitkit/algorithms"
	"github.com/limitkit/limitkit/internal/rediswire"
)

// script is one limitkit Lua script as Redis sees it.
type script struct {
	name, body, sha string
}

// The names of the all-or-nothing script, and of those that decide Takes,
// Peeks and TakeAlls sent together, in reports.
const (
	multiScript     = "multi"
	batchScript     = "batch"
	peekBatchScript = "peek-batch"
	groupsScript    = "groups"
)

func scripts() []script {
	var out []script
	add := func(name, body string) {
		sum := sha1.Sum([]byte(body))
		out = append(out, script{name: name, body: body, sha: hex.EncodeToString(sum[:])})
	}
	for _, name := range algorithms.Names() {
		if body, err := rediswire.Script(name); err == nil {
			add(string(name), body)
		}
	}
	add(multiScript, rediswire.MultiScript())
	add(batchScript, rediswire.BatchScript())
	add(peekBatchScript, rediswire.PeekBatchScript())
	add(groupsScript, rediswire.GroupsScript())
	return out
}

// truncated matches SLOWLOG's shortened arguments: the first 128 bytes,
// then "... (N more bytes)".
var truncated = regexp.MustCompile(`(?s)^(.{128})\.\.\. \((\d+) more bytes\)$`)

// matchScript returns the name of the limitkit script a SLOWLOG entry ran,
// or "".
func matchScript(args []string, known []script) string {
	if len(args) < 2 {
		return ""
	}
	switch strings.ToUpper(args[0]) {
	case "EVALSHA", "EVALSHA_RO":
		sha := strings.ToLower(args[1])
		for _, s := range known {
			if s.sha == sha {
				return s.name
			}
		}
	case "EVAL", "EVAL_RO":
		body := args[1]
		for _, s := range known {
			if s.body == body {
				return s.name
			}
		}
		if m := truncated.FindStringSubmatch(body); m != nil {
			more, err := strconv.Atoi(m[2])
			if err != nil {
				return ""
			}
			for _, s := range known {
				if len(s.body) == len(m[1])+more && strings.HasPrefix(s.body, m[1]) {
					return s.name
				}
			}
		}
	}
	return ""
}

// readSlowlog adds n's SLOWLOG entries of limitkit scripts to the report.
func (r *Report) readSlowlog(ctx context.Context, n *redis.Client, count int64) error {
	if count == 0 {
		return nil
	}
	entries, err := n.SlowLogGet(ctx, count).Result()
	if err != nil {
		return fmt.Errorf("SLOWLOG GET on %s: %w", n.Options().Addr, err)
	}
	r.SlowlogRead += len(entries)
	known := scripts()
	for _, e := range entries {
		name := matchScript(e.Args, known)
		if name == "" {
			continue
		}
		i := slices.IndexFunc(r.Slow, func(s SlowScript) bool { return s.Script == name })
		if i < 0 {
			r.Slow = append(r.Slow, SlowScript{Script: name})
			i = len(r.Slow) - 1
		}
		r.Slow[i].Entries++
		r.Slow[i].Slowest = max(r.Slow[i].Slowest, e.Duration)
	}
	slices.SortFunc(r.Slow, func(a, b SlowScript) int { return strings.Compare(a.Script, b.Script) })
	return nil
}
