import { escapeHiddenCharacters } from '../../lib/hidden-characters.js';
import { createTwoFilesPatch } from 'diff';
import { canonicalJson } from '../../lib/canonical-json.js';
import { sha256Hex } from '../../lib/hash.js';
import { nestsDeeperThan } from '../../lib/storable-input.js';
import type { UpstreamToolDefinition } from './mcp-connector.js';

/**
 * Upstream MCP tool definitions and their pins (docs/decisions/0050-upstream-tool-definitions.md), as
 * pure rules: what a definition is, its hash, how a fresh `tools/list` changes what is kept, what
 * an operator's accept changes, and whether a call may go to an upstream tool. The service reads
 * and writes; nothing here does.
 */

/** The parts of an upstream tool that reach a model or shape a call: what is hashed and pinned (exactly what the connector reads). */
export type ToolDefinition = UpstreamToolDefinition;

export const definitionStatuses = ['pinned', 'changed', 'new', 'removed'] as const;
/**
 * `pinned`: the upstream shows what was accepted. `changed`: it shows something else. `new`: a
 * tool that appeared upstream after the first read, never accepted. `removed`: accepted, gone upstream.
 */
export type DefinitionStatus = (typeof definitionStatuses)[number];

/** One kept definition: the row of `tool_definitions`. */
export interface KeptDefinition {
  name: string;
  pinned: ToolDefinition | null;
  pinnedHash: string | null;
  pinnedAt: Date | null;
  current: ToolDefinition | null;
  currentHash: string | null;
  /** When the upstream first showed something other than the pin (null while it shows the pin). */
  changedAt: Date | null;
}

/** A tool's definitions may hold at most this many upstream tools (what one `tools/list` may name). */
export const MAX_DEFINITIONS = 1000;
/** A definition deeper than this is refused: it is hashed, stored and shown. */
const MAX_DEFINITION_DEPTH = 32;

const optionalFields = ['title', 'description', 'outputSchema', 'annotations'] as const;

/** What is kept of a listed tool: the decided fields, nothing else (`_meta`, icons and the like are not pinned). */
export function definitionOf(listed: UpstreamToolDefinition): ToolDefinition {
  const definition: ToolDefinition = { name: listed.name, inputSchema: listed.inputSchema };
  for (const field of optionalFields) {
    if (listed[field] !== undefined) Object.assign(definition, { [field]: listed[field] });
  }
  return definition;
}

/** SHA-256 (hex) of the definition's RFC 8785 canonical JSON: equal exactly when the definitions are. */
export const definitionHash = (definition: ToolDefinition): string => sha256Hex(canonicalJson(definition));

export function statusOf(kept: Pick<KeptDefinition, 'pinnedHash' | 'currentHash'>): DefinitionStatus {
  if (kept.pinnedHash === null) return 'new';
  if (kept.currentHash === null) return 'removed';
  return kept.pinnedHash === kept.currentHash ? 'pinned' : 'changed';
}

/**
 * The definition as the diff shows it: canonical key order, two-space indentation, and hidden
 * characters written as their JSON escapes, so that an operator sees what a model would read.
 */
const readable = (definition: ToolDefinition | null) =>
  definition === null
    ? ''
    : `${escapeHiddenCharacters(JSON.stringify(JSON.parse(canonicalJson(definition)), null, 2))}\n`;

/** A unified diff from the pinned definition to the current one; null while they are the same. */
export function definitionDiff(kept: KeptDefinition): string | null {
  if (statusOf(kept) === 'pinned') return null;
  const name = kept.name;
  return createTwoFilesPatch(
    `pinned/${name}`,
    `current/${name}`,
    readable(kept.pinned),
    readable(kept.current),
    kept.pinnedHash ?? '',
    kept.currentHash ?? '',
  );
}

/** Why a `tools/list` answer cannot be kept; undefined when it can. */
export function listProblem(listed: readonly UpstreamToolDefinition[]): string | undefined {
  if (listed.length > MAX_DEFINITIONS)
    return `The MCP server lists ${listed.length} tools; at most ${MAX_DEFINITIONS} are kept`;
  const names = new Set<string>();
  for (const tool of listed) {
    if (typeof tool.name !== 'string' || tool.name.length === 0 || tool.name.length > 128)
      return 'The MCP server lists a tool without a valid name';
    if (names.has(tool.name)) return `The MCP server lists the tool "${tool.name}" twice`;
    names.add(tool.name);
    if (nestsDeeperThan(tool, MAX_DEFINITION_DEPTH))
      return `The definition of "${tool.name}" nests deeper than ${MAX_DEFINITION_DEPTH} levels`;
  }
  return undefined;
}

const byName = (a: { name: string }, b: { name: string }) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);

/** A definition whose status a refresh changed: what audit and webhooks report. */
export interface DefinitionChange {
  name: string;
  status: DefinitionStatus;
  pinned_hash: string | null;
  current_hash: string | null;
}

export interface RefreshPlan {
  /** Every definition the tool keeps after the refresh. */
  kept: KeptDefinition[];
  /** Definitions the upstream shows differently than at the last read (what `tool.definition_changed` reports). */
  changes: DefinitionChange[];
  /** True when this read is the first: everything it read is pinned. */
  pinnedNow: boolean;
}

/**
 * How a fresh read changes the kept definitions. The first read (`alreadyPinned` false) pins
 * everything it finds. Later reads only move `current`: a definition that differs from its pin
 * is `changed` (since the first read that showed a difference), one that appeared is `new`, one
 * that vanished is `removed` (a `new` one that vanished is forgotten), one that went back to its
 * pin is `pinned` again. `only` limits what is kept to the one upstream tool a connector calls.
 */
export function planRefresh(
  previous: readonly KeptDefinition[],
  listed: readonly UpstreamToolDefinition[],
  options: { alreadyPinned: boolean; only: string | null; now: Date },
): RefreshPlan {
  const { alreadyPinned, only, now } = options;
  const read = new Map(
    [...listed]
      .filter((tool) => only === null || tool.name === only)
      .sort(byName)
      .map((tool) => {
        const definition = definitionOf(tool);
        return [tool.name, { definition, hash: definitionHash(definition) }] as const;
      }),
  );
  if (!alreadyPinned) {
    const kept = [...read.values()].map(({ definition, hash }) => ({
      name: definition.name,
      pinned: definition,
      pinnedHash: hash,
      pinnedAt: now,
      current: definition,
      currentHash: hash,
      changedAt: null,
    }));
    return { kept, changes: [], pinnedNow: true };
  }
  const kept: KeptDefinition[] = [];
  const changes: DefinitionChange[] = [];
  const before = new Map(previous.map((definition) => [definition.name, definition]));
  for (const [name, { definition, hash }] of read) {
    const old = before.get(name);
    const next: KeptDefinition = old
      ? { ...old, current: definition, currentHash: hash }
      : {
          name,
          pinned: null,
          pinnedHash: null,
          pinnedAt: null,
          current: definition,
          currentHash: hash,
          changedAt: null,
        };
    kept.push(settle(old, next, now, changes));
  }
  for (const old of previous) {
    if (read.has(old.name) || old.pinnedHash === null) continue;
    kept.push(settle(old, { ...old, current: null, currentHash: null }, now, changes));
  }
  return { kept: kept.sort(byName), changes: changes.sort(byName), pinnedNow: false };
}

/** `changedAt` for the definition's new state, and its change when the upstream shows something else than at the last read. */
function settle(
  old: KeptDefinition | undefined,
  next: KeptDefinition,
  now: Date,
  changes: DefinitionChange[],
): KeptDefinition {
  const status = statusOf(next);
  // Reported: a move to something the upstream did not show before, and a return to the pin.
  if (old?.currentHash !== next.currentHash) {
    changes.push({ name: next.name, status, pinned_hash: next.pinnedHash, current_hash: next.currentHash });
  }
  if (status === 'pinned') return { ...next, changedAt: null };
  return { ...next, changedAt: old && old.changedAt !== null && statusOf(old) !== 'pinned' ? old.changedAt : now };
}

/** An operator's acceptance of one definition: its name, and optionally the current hash they reviewed. */
export interface Acceptance {
  name: string;
  current_hash?: string | null;
}

export type AcceptPlan =
  | { ok: true; kept: KeptDefinition[]; accepted: DefinitionChange[] }
  | { ok: false; problem: 'unknown' | 'not_changed' | 'moved'; name: string };

/**
 * What accepting changes: `changed` and `new` definitions pin what the upstream shows now,
 * `removed` ones are forgotten. Without a list, every definition that differs from its pin is
 * accepted; with one, each named definition must differ from its pin, and a `current_hash` given
 * must still be the current one (the upstream may have moved again since the operator looked).
 */
export function planAccept(
  previous: readonly KeptDefinition[],
  acceptances: readonly Acceptance[] | null,
  now: Date,
): AcceptPlan {
  const byName = new Map(previous.map((definition) => [definition.name, definition]));
  const chosen = new Set<string>();
  for (const acceptance of acceptances ?? previous.filter((d) => statusOf(d) !== 'pinned')) {
    const kept = byName.get(acceptance.name);
    if (!kept) return { ok: false, problem: 'unknown', name: acceptance.name };
    if (statusOf(kept) === 'pinned') return { ok: false, problem: 'not_changed', name: acceptance.name };
    // null is a hash too: "reviewed as removed", refused if the tool came back meanwhile.
    const reviewed = 'current_hash' in acceptance ? acceptance.current_hash : undefined;
    if (reviewed !== undefined && reviewed !== kept.currentHash)
      return { ok: false, problem: 'moved', name: acceptance.name };
    chosen.add(acceptance.name);
  }
  const kept: KeptDefinition[] = [];
  const accepted: DefinitionChange[] = [];
  for (const definition of previous) {
    if (!chosen.has(definition.name)) {
      kept.push(definition);
      continue;
    }
    accepted.push({
      name: definition.name,
      status: statusOf(definition),
      pinned_hash: definition.pinnedHash,
      current_hash: definition.currentHash,
    });
    if (definition.current === null) continue;
    kept.push({
      ...definition,
      pinned: definition.current,
      pinnedHash: definition.currentHash,
      pinnedAt: now,
      changedAt: null,
    });
  }
  return { ok: true, kept, accepted };
}

/** Why a call of an upstream tool is held back by its definition; undefined when it may go. */
export type DefinitionHold = {
  code: 'TOOL_DEFINITION_CHANGED' | 'TOOL_NOT_FOUND_UPSTREAM';
  message: string;
  details: Record<string, unknown>;
};

/**
 * A call may go to `name` when nothing was read yet (no pin to hold it to), or when the upstream
 * shows the pinned definition. A definition that changed or is new waits for an operator; a tool
 * the upstream no longer lists (or never did) is not called.
 */
export function definitionHold(
  state: { pinned: boolean; definitions: ReadonlyMap<string, KeptDefinition> },
  name: string,
): DefinitionHold | undefined {
  if (!state.pinned) return undefined;
  const kept = state.definitions.get(name);
  const status = kept ? statusOf(kept) : 'removed';
  if (status === 'pinned') return undefined;
  if (status === 'removed') {
    return {
      code: 'TOOL_NOT_FOUND_UPSTREAM',
      message: `The upstream MCP server does not list the tool "${name}" (any more)`,
      details: { tool: name },
    };
  }
  return {
    code: 'TOOL_DEFINITION_CHANGED',
    message:
      status === 'new'
        ? `The upstream tool "${name}" was never accepted: an operator must accept its definition`
        : `The upstream MCP server changed the definition of "${name}": an operator must accept it before it is called`,
    details: { tool: name, pinned_hash: kept!.pinnedHash, current_hash: kept!.currentHash },
  };
}
