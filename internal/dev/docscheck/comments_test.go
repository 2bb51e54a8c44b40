package docscheck

import (
	"slices"
	"strings"
	"testing"
)

// elsewhere are files of other repositories that comments cite, by the
// repository they are in.
var elsewhere = map[string]string{
	"src/redis/fixed_cache_impl.go":                            "envoyproxy/ratelimit",
	"src/limiter/cache_key.go":                                 "envoyproxy/ratelimit",
	"test/stats/manager_impl_test.go":                          "envoyproxy/ratelimit",
	"test/integration/integration_test.go":                     "envoyproxy/ratelimit",
	"test/service/ratelimit_test.go":                           "envoyproxy/ratelimit",
	"test/limiter/base_limiter_test.go":                        "envoyproxy/ratelimit",
	"test/redis/fixed_cache_impl_test.go":                      "envoyproxy/ratelimit",
	"internal/infrastructure/kubernetes/ratelimit/resource.go": "envoyproxy/gateway",
	"internal/xds/translator/ratelimit.go":                     "envoyproxy/gateway",
}

func TestCommentsCiteFilesThatExist(t *testing.T) {
	// The controls cite gone files as examples.
	skip := func(rel string) bool { return strings.HasSuffix(rel, "/comments_test.go") }
	got, err := CommentCitations(root, skip)
	if err != nil {
		t.Fatal(err)
	}
	for f, miss := range got {
		miss = slices.DeleteFunc(miss, func(name string) bool { return elsewhere[name] != "" })
		if len(miss) > 0 {
			t.Errorf("%s: comments cite %q, which do not exist", f, miss)
		}
	}
}

// TestMissingCitationsCatchesAGoneFile is the control: the comment
// loglib.lua once had (slidinglog.go, gone) is caught, in Lua, Go and
// YAML comments; the file it cites now, a path from the root, a name
// without its folder, a URL and a string outside a comment are not.
func TestMissingCitationsCatchesAGoneFile(t *testing.T) {
	files := []string{"algorithms/sliding_log.go", "docs/algorithms.md"}
	text := "-- the Lua twin of slidingLogTake (slidinglog.go)\n" +
		"-- the Lua twin of slidingLogTake (sliding_log.go), see docs/algorithms.md\n" +
		"local s = 'gone.lua'\n" +
		"// and Go's: ring.go, nowhere.go, https://example.com/x/gone.go\n"
	got := MissingCitations(text, []string{"--", "//"}, files, root)
	if strings.Join(got, " ") != "slidinglog.go ring.go nowhere.go" {
		t.Fatalf("MissingCitations = %q, want [slidinglog.go ring.go nowhere.go]", got)
	}
	got = MissingCitations("key: 1 # as in slidinglog.go, not in sliding_log.go\n", []string{"#"}, files)
	if strings.Join(got, " ") != "slidinglog.go" {
		t.Fatalf("in YAML: %q, want [slidinglog.go]", got)
	}
	if got := MissingCitations("// slidinglog.go\n", []string{"//"}, nil, root); len(got) != 1 {
		t.Fatalf("without the file list: %q", got)
	}
}
