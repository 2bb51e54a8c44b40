package main

import (
	"fmt"
	"io"
	"time"
)

// goal is one of issue 39's goals and whether a run met it.
type goal struct {
	name string
	got  string
	met  bool
}

// goalsOf checks the adaptive run (and the unprotected one, when there is
// one) against the goals: settling within ±25% of C within 10 s of each
// step, goodput of 90% of capacity where the unprotected server's falls
// below 50%, critical requests 99% successful while sheddable ones absorb
// the shedding, and a p99 of admitted requests within 2× the base.
func goalsOf(reps map[string]Report) []goal {
	ad, ok := reps["adaptive"]
	if !ok {
		return nil
	}
	var gs []goal
	for i, p := range ad.Phases[1:] {
		got := "never"
		if p.Settle >= 0 {
			got = p.Settle.Round(10 * time.Millisecond).String()
		}
		gs = append(gs, goal{fmt.Sprintf("settles within ±25%% of C=%d within 10s of step %d", p.Capacity, i+1),
			got, p.Settle >= 0 && p.Settle <= 10*time.Second})
	}
	for i, p := range ad.Phases {
		gs = append(gs,
			goal{fmt.Sprintf("phase %d: goodput >= 90%% of capacity", i+1), fmt.Sprintf("%.0f%%", 100*p.Goodput), p.Goodput >= 0.9},
			goal{fmt.Sprintf("phase %d: critical >= 99%% served", i+1), fmt.Sprintf("%.1f%%", 100*p.Critical), p.Critical >= 0.99},
			goal{fmt.Sprintf("phase %d: sheddable absorbs the shedding (served <= default's)", i+1),
				fmt.Sprintf("%.1f%% vs %.1f%%", 100*p.Sheddable, 100*p.Default), p.Sheddable <= p.Default},
			goal{fmt.Sprintf("phase %d: p99 of admitted <= 2x base", i+1), fmt.Sprintf("%.2fx", p.P99Base), p.P99Base <= 2})
	}
	if un, ok := reps["unprotected"]; ok {
		for i, p := range un.Phases {
			gs = append(gs, goal{fmt.Sprintf("phase %d: unprotected goodput < 50%% (the setup overloads)", i+1),
				fmt.Sprintf("%.0f%%", 100*p.Goodput), p.Goodput < 0.5})
		}
	}
	return gs
}

func goals(w io.Writer, reps map[string]Report) {
	fmt.Fprintln(w, "\ngoals (issue 39), adaptive server:")
	for _, g := range goalsOf(reps) {
		mark := "NOT MET"
		if g.met {
			mark = "met"
		}
		fmt.Fprintf(w, "  %-7s %-64s %s\n", mark, g.name, g.got)
	}
}
