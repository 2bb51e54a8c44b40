package algorithms

import (
	_ "embed"
	"strconv"
)

// Each algorithm's Lua twin (its descriptor's Lua) is the body of a
// function step(key, now, w, limit, cost, take, refund, at) that runs
// after the prelude the bodies share (prelude.lua, with key_ttl generated
// from Rule.KeyTTL's constants). The script runner (backend/internal/redisengine)
// wraps them into the scripts it sends; this package holds no transport.

//go:embed prelude.lua
var preludeLua string

// LuaPrelude returns the Lua that every algorithm's body runs after: the
// helpers they share, among them key_ttl, the twin of Rule.KeyTTL.
func LuaPrelude() string {
	return preludeLua + "local function key_ttl(reset, w)\n  return reset + " +
		strconv.Itoa(keepWindows) + " * w + " + strconv.FormatInt(ExpiryMargin.Milliseconds(), 10) + "\nend\n" + keyTTLPX
}

// keyTTLPX defines key_ttl_px(reset, w): key_ttl formatted for PX or
// PEXPIRE. The takes of one batch mostly share a rule and a reset, and a
// string.format call costs Redis' Lua as much as the rest of a fast take's
// arithmetic, so the last value is kept.
const keyTTLPX = `local ttl_reset, ttl_w, ttl_px
local function key_ttl_px(reset, w)
  if reset ~= ttl_reset or w ~= ttl_w then
    ttl_reset, ttl_w, ttl_px = reset, w, string.format('%d', key_ttl(reset, w))
  end
  return ttl_px
end
`
