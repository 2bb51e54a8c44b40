package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		done         bool
		code         int
		stdout, errs string
	}{
		{args: nil},
		{args: []string{"-version"}, done: true, stdout: "limitkit-rls (devel)\n"},
		{args: []string{"--version"}, done: true, stdout: "limitkit-rls (devel)\n"},
		{args: []string{"-h"}, done: true, stdout: "Usage:"},
		{args: []string{"--help"}, done: true, stdout: "-version"},
		{args: []string{"-x"}, done: true, code: 2, errs: "flag provided but not defined: -x"},
		{args: []string{"serve"}, done: true, code: 2, errs: "takes no arguments"},
	} {
		var stdout, stderr bytes.Buffer
		done, code := parseFlags(tc.args, &stdout, &stderr)
		if done != tc.done || code != tc.code {
			t.Errorf("%q: done %v code %d, want %v %d", tc.args, done, code, tc.done, tc.code)
		}
		if !strings.Contains(stdout.String(), tc.stdout) || (tc.stdout == "" && stdout.Len() > 0) {
			t.Errorf("%q: stdout %q, want %q in it", tc.args, stdout.String(), tc.stdout)
		}
		if !strings.Contains(stderr.String(), tc.errs) || (tc.errs == "" && stderr.Len() > 0) {
			t.Errorf("%q: stderr %q, want %q in it", tc.args, stderr.String(), tc.errs)
		}
	}
}
