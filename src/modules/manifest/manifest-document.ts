import type { FieldError } from '../../errors.js';
import { canonicalHash } from '../../lib/canonical-json.js';

/**
 * The agent manifest as an organization submits it, and the rules of docs/decisions/0016-manifests.md.
 * Validation never throws: it reports every problem with its dotted field path, so the validate
 * endpoint can answer 200 with them and registration can turn them into one 422.
 */

export interface ManifestDocument {
  version: string;
  agent: {
    id: string;
    name: string;
    version: string;
    description?: string;
    organization?: string;
    team?: string;
  };
  capabilities: { requested: string[] };
  constraints?: {
    max_actions_per_hour?: number;
    max_actions_per_day?: number;
    require_human_approval?: string[];
  };
  metadata?: { contact?: string; documentation?: string };
  [unknown: string]: unknown;
}

export const DEFAULT_MAX_ACTIONS_PER_HOUR = 100;
export const DEFAULT_MAX_ACTIONS_PER_DAY = 1000;

export const agentIdPattern = /^[a-z0-9]([a-z0-9-]{1,62}[a-z0-9])?$/;
export const capabilityPattern = /^[a-z0-9_.-]+:[a-z0-9_.-]+$/;

const known = {
  top: ['version', 'agent', 'capabilities', 'constraints', 'metadata'],
  agent: ['id', 'name', 'version', 'description', 'organization', 'team'],
  capabilities: ['requested', 'approved'],
  constraints: ['max_actions_per_hour', 'max_actions_per_day', 'require_human_approval'],
  metadata: ['contact', 'documentation'],
};

export interface ManifestCheck {
  errors: FieldError[];
  warnings: FieldError[];
  /** The document as stored: nulls removed, `capabilities.approved` dropped (approval sets it). */
  document: ManifestDocument | undefined;
  manifestHash: string | undefined;
}

const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** Drops null-valued members recursively: an absent optional block stays absent. */
function withoutNulls(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(withoutNulls);
  if (!isObject(value)) return value;
  return Object.fromEntries(
    Object.entries(value)
      .filter(([, v]) => v !== null)
      .map(([k, v]) => [k, withoutNulls(v)]),
  );
}

export function checkManifest(payload: unknown): ManifestCheck {
  const errors: FieldError[] = [];
  const warnings: FieldError[] = [];
  const error = (field: string, message: string) => errors.push({ field, message });
  const warn = (field: string, message: string) => warnings.push({ field, message });

  if (!isObject(payload)) {
    error('', 'the manifest must be a JSON object');
    return { errors, warnings, document: undefined, manifestHash: undefined };
  }
  const doc = withoutNulls(payload) as Record<string, unknown>;

  const unknownFields = (block: Record<string, unknown>, allowed: string[], prefix: string) => {
    for (const key of Object.keys(block)) {
      if (!allowed.includes(key)) warn(`${prefix}${key}`, 'unknown field; it is stored but has no effect');
    }
  };
  const requireString = (block: Record<string, unknown>, key: string, prefix: string) => {
    const value = block[key];
    if (value === undefined) error(`${prefix}${key}`, 'is required');
    else if (typeof value !== 'string' || !value.trim()) error(`${prefix}${key}`, 'must be a non-empty string');
    return typeof value === 'string' ? value : undefined;
  };
  const optionalString = (block: Record<string, unknown>, key: string, prefix: string) => {
    const value = block[key];
    if (value !== undefined && typeof value !== 'string') error(`${prefix}${key}`, 'must be a string');
  };
  const capabilityList = (value: unknown, field: string): string[] => {
    if (!Array.isArray(value)) {
      error(field, 'must be an array of capability strings');
      return [];
    }
    const seen = new Set<string>();
    value.forEach((item, i) => {
      if (typeof item !== 'string' || !capabilityPattern.test(item)) {
        error(`${field}[${i}]`, 'must be "<domain>:<action>" with lowercase letters, digits, "_", "." or "-"');
      } else if (seen.has(item)) {
        error(`${field}[${i}]`, `duplicates "${item}"`);
      } else {
        seen.add(item);
      }
    });
    return [...seen];
  };

  unknownFields(doc, known.top, '');
  requireString(doc, 'version', '');

  if (doc.agent === undefined) error('agent', 'is required');
  else if (!isObject(doc.agent)) error('agent', 'must be an object');
  else {
    const agent = doc.agent;
    const id = requireString(agent, 'id', 'agent.');
    if (id !== undefined && !agentIdPattern.test(id)) {
      error(
        'agent.id',
        `must be lowercase letters, digits and hyphens, not starting or ending with a hyphen (${agentIdPattern.source})`,
      );
    }
    requireString(agent, 'name', 'agent.');
    requireString(agent, 'version', 'agent.');
    for (const key of ['description', 'organization', 'team']) optionalString(agent, key, 'agent.');
    unknownFields(agent, known.agent, 'agent.');
  }

  let requested: string[] = [];
  if (doc.capabilities === undefined) error('capabilities', 'is required');
  else if (!isObject(doc.capabilities)) error('capabilities', 'must be an object');
  else {
    const capabilities = doc.capabilities;
    if (capabilities.requested === undefined) error('capabilities.requested', 'is required');
    else {
      requested = capabilityList(capabilities.requested, 'capabilities.requested');
      if (Array.isArray(capabilities.requested) && capabilities.requested.length === 0) {
        error('capabilities.requested', 'must request at least one capability');
      }
    }
    if (capabilities.approved !== undefined) {
      if (Array.isArray(capabilities.approved) && capabilities.approved.length === 0) {
        delete capabilities.approved;
      } else {
        error('capabilities.approved', 'is set by approval and must be empty or absent at registration');
      }
    }
    unknownFields(capabilities, known.capabilities, 'capabilities.');
  }

  if (doc.constraints === undefined) {
    warn(
      'constraints',
      `no constraints defined: defaults apply (max_actions_per_hour ${DEFAULT_MAX_ACTIONS_PER_HOUR}, max_actions_per_day ${DEFAULT_MAX_ACTIONS_PER_DAY})`,
    );
  } else if (!isObject(doc.constraints)) error('constraints', 'must be an object');
  else {
    const constraints = doc.constraints;
    const limit = (key: string, fallback: number) => {
      const value = constraints[key];
      if (value === undefined) {
        warn(`constraints.${key}`, `not defined: the default ${fallback} applies`);
        return undefined;
      }
      if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
        error(`constraints.${key}`, 'must be a positive integer');
        return undefined;
      }
      return value;
    };
    const hourly = limit('max_actions_per_hour', DEFAULT_MAX_ACTIONS_PER_HOUR);
    const daily = limit('max_actions_per_day', DEFAULT_MAX_ACTIONS_PER_DAY);
    // Only limits the manifest sets are compared: a default hourly limit above an explicit daily
    // one is not the author's mistake, the daily limit simply binds first.
    if (hourly !== undefined && daily !== undefined && hourly > daily) {
      error('constraints.max_actions_per_hour', `must not exceed max_actions_per_day (${daily})`);
    }
    if (constraints.require_human_approval !== undefined) {
      const needHuman = capabilityList(constraints.require_human_approval, 'constraints.require_human_approval');
      needHuman.forEach((capability) => {
        if (!requested.includes(capability)) {
          const i = (constraints.require_human_approval as unknown[]).indexOf(capability);
          error(`constraints.require_human_approval[${i}]`, `"${capability}" is not in capabilities.requested`);
        }
      });
    }
    unknownFields(constraints, known.constraints, 'constraints.');
  }

  if (doc.metadata !== undefined) {
    if (!isObject(doc.metadata)) error('metadata', 'must be an object');
    else {
      optionalString(doc.metadata, 'contact', 'metadata.');
      optionalString(doc.metadata, 'documentation', 'metadata.');
      unknownFields(doc.metadata, known.metadata, 'metadata.');
    }
  }

  if (errors.length) return { errors, warnings, document: undefined, manifestHash: undefined };
  const document = doc as ManifestDocument;
  return { errors, warnings, document, manifestHash: canonicalHash(document) };
}

/** The limits the gateway enforces: the manifest's own, else the defaults. */
export function effectiveLimits(document: ManifestDocument) {
  return {
    maxActionsPerHour: document.constraints?.max_actions_per_hour ?? DEFAULT_MAX_ACTIONS_PER_HOUR,
    maxActionsPerDay: document.constraints?.max_actions_per_day ?? DEFAULT_MAX_ACTIONS_PER_DAY,
  };
}
