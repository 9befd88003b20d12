import { createHash } from 'node:crypto';

/**
 * The MCP tool name of a capability (docs/decisions/0038-mcp-proxy-mode.md). LLM providers accept tool
 * names matching `^[A-Za-z0-9_-]{1,64}$`, so `<domain>:<action>` (lowercase `[a-z0-9_.-]` parts)
 * cannot be used as it is. The mapping is a pure function of the capability, so a tool keeps its
 * name across manifest versions and processes, and it is one-to-one:
 *
 * - a plain capability (no `_` or `.` in it, at most 64 characters as a name) reads as itself with
 *   `:` written `__`: `billing:refund` → `billing__refund`. Such a name has exactly two
 *   underscores, side by side, and turns back into its capability;
 * - any other capability is spelled the same way (`.` as `_`), cut to leave room, trailing `_`/`-`
 *   dropped, and suffixed with `_` and 12 hex digits of its SHA-256: `payments.v2:send` →
 *   `payments_v2__send_5c1f0a…`. Its underscores are never exactly one adjacent pair, so it can
 *   never equal a plain name; two of them collide only if 48 bits of SHA-256 do.
 */

export const TOOL_NAME_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;
const MAX_TOOL_NAME = 64;
const HASH_DIGITS = 12;
const plainCapability = /^[a-z0-9-]+:[a-z0-9-]+$/;
const plainName = /^([a-z0-9-]+)__([a-z0-9-]+)$/;

export function toolNameOf(capability: string): string {
  const spelled = capability.replace(':', '__').replace(/\./g, '_');
  if (plainCapability.test(capability) && spelled.length <= MAX_TOOL_NAME) return spelled;
  const digest = createHash('sha256').update(capability).digest('hex').slice(0, HASH_DIGITS);
  const stem = spelled.slice(0, MAX_TOOL_NAME - HASH_DIGITS - 1).replace(/[_-]+$/, '');
  return `${stem}_${digest}`;
}

/**
 * The capability a plain tool name stands for, whether or not the agent has it (a call then gets
 * a recorded denial rather than "unknown tool"); undefined for hashed or foreign names.
 */
export function capabilityOfPlainName(name: string): string | undefined {
  const match = plainName.exec(name);
  return match ? `${match[1]}:${match[2]}` : undefined;
}
