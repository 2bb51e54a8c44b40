// Package rls is an Envoy rate limit service
// (envoy.service.ratelimit.v3.RateLimitService) on limitkit's stores and
// algorithms: a drop-in for envoyproxy/ratelimit that reads the same YAML
// and answers the same way, with exact windows, several limits per
// descriptor and all-or-nothing requests.
//
// Configuration: ParseConfig reads one YAML file of the reference server's
// format; NewRules compiles the files of a runtime directory (each a File)
// into Rules, once, refusing a domain defined twice. Rules are immutable
// and safe for concurrent use.
//
//	rules, err := rls.NewRules(rls.File{Name: "config.yaml", Data: data})
//	if err != nil { ... } // config.yaml:7: descriptors[0].rate_limit.unit: invalid rate limit unit 'minutes'; write second, minute, ...
//	svc, err := rls.New(store, rules, rls.WithShadowMode(false))
//	srv := grpc.NewServer()
//	rls.Register(srv, svc)
//
// The store is any backend.Store; a service in production wraps its Redis
// store in package fallback, so that each limit's on_failure policy
// (backend.FailurePolicy, carried in every request) decides while Redis is
// down, with no gRPC error.
//
// The YAML is the reference server's: domain; nested descriptors of key
// and optional value (with '*' wildcards anywhere in a value); rate_limit
// with unit (second, minute, hour, day, week, month, year, any case) and
// requests_per_unit; unlimited; name; replaces; shadow_mode;
// detailed_metric; value_to_metric (statistics keys carry the request's
// value there); share_threshold (every value matching a wildcard counts
// on one counter); quota_mode (a quota-mode limit refuses the request
// only when every quota-mode limit of the request refuses); and metadata,
// accepted and not sent. Its refusals (unknown keys, a duplicate
// key at one level, unlimited with a unit) are refusals here, each naming
// the file, the line and what to change. Extensions, all optional:
//
//   - algorithm: in a rate_limit, any rate algorithm of package algorithms
//     (default fixed_window, the reference's; concurrency is refused, it
//     holds leases);
//   - unit_multiplier: the window is unit x multiplier; fixed windows are
//     aligned to multiples of it since the Unix epoch (days to UTC
//     midnight), and current_limit carries the multiplier;
//   - rate_limits: a list beside rate_limit, several limits on one
//     descriptor, all of which must pass;
//   - on_failure: per limit, "fail_open", "fail_closed", "local" or
//     "local:N" (see backend.FailurePolicy).
//
// Matching is the reference server's: at each level of a request
// descriptor the exact key_value, then the first wildcard value that
// matches, then the key alone; a limit applies only where the whole
// request descriptor matched (its last entry reached a rule with a limit).
//
// Decisions: Service.ShouldRateLimit turns the limits of every descriptor
// of a request into one backend.Store.TakeAll: a request is admitted only
// when every enforced limit admits it, and a refused request consumes no
// unit of any limit. Each status carries current_limit, limit_remaining
// (after the request when admitted; what the limit holds unconsumed when
// refused) and duration_until_reset, rounded up to whole seconds and never
// early: when refused, the time until a request of that cost could pass
// (the algorithm's RetryAfter, not a window's end); when admitted, the
// time until the limit is fully free again (its ResetAfter, the window's
// end for a fixed window, as the reference reports).
//
// hits_addend: a request-level 0 counts 1 (Envoy always sends 0 there); a
// descriptor's own hits_addend wins, and 0 there checks without consuming,
// refusing only a key counted over its limit (as the reference: a key
// exactly at its limit passes);
// the same descriptor twice in one request counts twice. Limits in shadow
// mode (shadow_mode: true on the rule) are decided and counted, and never
// refuse: they are taken after the enforced ones admitted the request.
// Global shadow mode (WithShadowMode) decides everything as if enforced
// and answers OK overall. An unknown domain, or a descriptor matching no
// rule, answers OK.
//
// A descriptor may carry its own limit (Envoy's limit override): it is
// counted as a fixed window of that unit, never in shadow mode, as by the
// reference server, and not at all in a domain with no configuration. A requests_per_unit of 0, or a request costing more
// than the limit, is refused without a store call.
//
// Costs: a request of one limit is one store call (Take). A request of
// several limits is one TakeAll that also hands back every limit's own
// result (backend.TakeEach), so nothing more is asked; on a store that
// gives none, each limit the result does not describe is peeked, all at
// once. A check (hits 0) is a peek before the TakeAll; a shadow limit is a
// Take of its own after it. At most backend.MaxRequests enforced limits
// fit one request (more is codes.InvalidArgument); rate_limit plus
// rate_limits hold at most 4 per descriptor.
//
// is_negative_hits gives the descriptor's hits back, before the TakeAll
// and whatever it decides, through the store's backend.UnitRefunder
// (found under any wrappers). What that means per algorithm:
//
//   - fixed_window, sliding_counter: up to hits units go back to the
//     window holding now; units counted in an earlier window are not
//     given back (for a fixed window they no longer count).
//   - sliding_log, compact_log: the newest hits timestamps still inside
//     the window are removed (the request being given back is the latest
//     to have been admitted, as a rule, and the newest units are the ones
//     that would have counted longest).
//   - two_level: its newest units, from its log or, on a light key, from
//     its current window's counter, then the previous one's.
//   - gcra: up to hits units of the bucket's debt are paid back.
//
// Never more than the key counts, so never beyond the limit; units that
// slid out are not given back (backend.UnitRefunder,
// algorithms.Rule.GiveBack).
//
// A negative descriptor never refuses the request; its status reports
// what is left afterwards. Through a deny cache the units given back end
// the denials remembered for the key in every process (denycache.Store
// forwards GiveBack and announces it as a refund).
//
// Redis Cluster: a request's keys usually sit in different slots, and the
// Redis stores' TakeAll then checks every key (read-only), takes them in
// order, and refunds the earlier ones if a later one was taken by a
// concurrent caller in between. A refused request still consumes nothing
// once the call returns, and no limit is exceeded; while a refund is in
// flight a concurrent request can be refused by units about to be given
// back. On one server (or keys of one slot) TakeAll is one script.
//
// Failure: the service answers no gRPC error while its store fails. A
// store wrapped in package fallback decides each limit by its policy; a
// bare store that fails admits, except under fail_closed (a local policy
// needs fallback's local store). WithErrorOnFailure answers
// codes.Unavailable instead, as the reference server does.
//
// Keys are derived from the domain, the request descriptor's entries and
// the limit's window and algorithm, never from the config generation, so
// counts survive SetRules.
package rls
