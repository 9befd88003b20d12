import { Environment } from '@marcbachmann/cel-js';
import type { CelNode } from './policy-condition-ast.js';
import { DETECTORS, scannedKindsIn } from './content-detectors.js';
import type { Detector } from './content-detectors.js';
import { DEFAULT_EVAL_BUDGET, detectorsCalled, instrument, metered } from './policy-condition-budget.js';
import { regularExpression, superLinearConstruct } from './policy-condition-cost.js';

/**
 * Policy conditions: CEL (Common Expression Language) over the facts of one gateway request,
 * through `@marcbachmann/cel-js`. A condition is checked once when it is saved (parsed, bounded,
 * type-checked against the declared variables, constructs whose cost grows faster than linearly
 * with the params refused: policy-condition-cost.ts) and compiled once per policy version;
 * evaluating it is then a call of the compiled program on the request's facts, within an
 * operation budget (policy-condition-budget.ts). One org's condition cannot hold the process.
 * Nothing here touches the database or the clock: the facts come in whole.
 */

export const MAX_CONDITION_LENGTH = 4096;

/** Bounds of a condition's syntax tree, at parse time: what runs outside loops is bounded by them. */
const limits = { maxAstNodes: 300, maxDepth: 32, maxListElements: 100, maxMapEntries: 100, maxCallArguments: 8 };

/** The CEL variables of docs/guides/policies.md#conditions. Integer fields are CEL ints (BigInt). */
export interface ConditionFacts {
  agent: { id: string; name: string; version: string; team: string };
  action: { type: string; tool: string; capability: string; params: Record<string, unknown> };
  params: Record<string, unknown>;
  key: { id: string; prefix: string; scopes: string[] };
  request: { time: Date; hour: bigint; weekday: bigint; channel: string; mode: string };
  /** The agent's earlier decisions in the policy's window, oldest first: only for a history policy. */
  history?: readonly HistoryFact[];
  /** The tool's result data (null when it failed): only after the tool ran, for `redact` and `deny_result` policies. */
  result?: unknown;
}

/** One earlier decision of the agent, as `history` gives it (docs/guides/policies.md#history). */
export interface HistoryFact {
  capability: string;
  type: string;
  tool: string;
  decision: string;
  executed: boolean;
  labels: readonly string[];
  at: Date;
}

const environment = new Environment({ limits, homogeneousAggregateLiterals: false })
  .registerVariable({ name: 'agent', schema: { id: 'string', name: 'string', version: 'string', team: 'string' } })
  .registerVariable({
    name: 'action',
    schema: { type: 'string', tool: 'string', capability: 'string', params: 'map<string, dyn>' },
  })
  .registerVariable('params', 'map<string, dyn>')
  .registerVariable({ name: 'key', schema: { id: 'string', prefix: 'string', scopes: 'list<string>' } })
  // `time` is dyn: the library cannot yet declare a timestamp field; the value is a timestamp.
  .registerVariable({
    name: 'request',
    schema: { time: 'dyn', hour: 'int', weekday: 'int', channel: 'string', mode: 'string' },
  });

// JSON numbers are CEL doubles, literals like `500` ints. CEL compares the two, but arithmetic
// between them has no overload: `params.amount * 2 > 1000` would fail on every request. Operators
// write such conditions; mixed arithmetic is done in double.
for (const op of ['+', '-', '*', '/'] as const) {
  const apply = (a: number, b: number) => (op === '+' ? a + b : op === '-' ? a - b : op === '*' ? a * b : a / b);
  environment.registerOperator(`double ${op} int`, (a: number, b: bigint) => apply(a, Number(b)));
  environment.registerOperator(`int ${op} double`, (a: bigint, b: number) => apply(Number(a), b));
}

// What a call carries (docs/decisions/0085-content-detectors.md): the kinds each detector finds in
// any string inside its argument, sorted. Charged by the characters they scan, once per request
// and object (policy-condition-budget.ts).
for (const detector of DETECTORS)
  environment.registerFunction(`${detector}(dyn): list<string>`, (value: unknown) => scannedKindsIn(detector, value));

/**
 * A policy with a history window also sees `history` (HistoryFact: `at` a timestamp, `labels` a
 * list of strings), and one on the tool's result sees `result`. Any other policy's condition that
 * names them fails its type check: it would always see nothing.
 */
const withHistory = (env: Environment) =>
  env.registerVariable({
    name: 'history',
    type: 'list<map<string, dyn>>',
    description: 'The agent’s earlier decisions in the window, oldest first',
  });
const withResult = (env: Environment) =>
  env.registerVariable({ name: 'result', type: 'dyn', description: 'The tool’s result data' });
const environments = {
  call: environment,
  history: withHistory(environment.clone()),
  result: withResult(environment.clone()),
  historyAndResult: withResult(withHistory(environment.clone())),
};
const environmentFor = ({ history, result }: CompileOptions) =>
  environments[history ? (result ? 'historyAndResult' : 'history') : result ? 'result' : 'call'];

export interface ConditionPosition {
  /** 0-based offset in the condition text. */
  offset: number;
  /** 1-based. */
  line: number;
  column: number;
}

export interface ConditionError {
  message: string;
  position: ConditionPosition | null;
}

/**
 * A checked condition, ready to evaluate within a budget of operations; `detectors` the content
 * detectors it calls, when any (its budget then grows with the params: contentAllowance).
 */
export type CompiledCondition = ((facts: ConditionFacts, budget: number) => unknown) & {
  detectors?: readonly Detector[];
};

export interface CompileOptions {
  /** The policy has a history window: the condition may read `history`. */
  history?: boolean;
  /** The policy applies to the tool's result (`redact`, `deny_result`): the condition may read `result`. */
  result?: boolean;
}

export type CompileResult = { ok: true; condition: CompiledCondition } | { ok: false; error: ConditionError };

function positionOf(text: string, offset: number | undefined): ConditionPosition | null {
  if (offset === undefined || !Number.isInteger(offset) || offset < 0) return null;
  const before = text.slice(0, offset).split('\n');
  return { offset, line: before.length, column: before[before.length - 1].length + 1 };
}

const firstLine = (message: string) => message.split('\n')[0].trim();

/**
 * Checks a condition as saved: length, syntax (within the bounds above), a type that can be true
 * (`bool`, or `dyn` such as `params.flag`, whose value is checked when evaluated), and a cost at
 * most linear in the params (no regular expressions, no nested comprehensions, no loop-invariant
 * scans inside a comprehension). Returns the compiled, metered program or the first problem.
 */
export function compileCondition(text: string, options: CompileOptions = {}): CompileResult {
  const fail = (message: string, offset?: number): CompileResult => ({
    ok: false,
    error: { message, position: positionOf(text, offset) },
  });
  if (text.trim() === '') return fail('must not be empty (omit the condition to match every request)');
  if (text.length > MAX_CONDITION_LENGTH) return fail(`must be at most ${MAX_CONDITION_LENGTH} characters`);
  let program: ReturnType<typeof environment.parse>;
  try {
    program = environmentFor(options).parse(text);
  } catch (error) {
    const node = (error as { node?: { pos?: number } }).node;
    return fail(firstLine((error as Error).message), node?.pos);
  }
  const ast = program.ast as unknown as CelNode;
  const regex = regularExpression(ast);
  if (regex) return fail(regex.message, regex.offset);
  const checked = program.check();
  if (!checked.valid) {
    const error = checked.error as Error & { node?: { pos?: number } };
    return fail(firstLine(error.message), error.node?.pos);
  }
  if (checked.type !== 'bool' && checked.type !== 'dyn')
    return fail(`must be a boolean expression, not ${checked.type}`, 0);
  // The cost rules read the checked types; the budget wraps what the type check installed.
  const refused = superLinearConstruct(ast);
  if (refused) return fail(refused.message, refused.offset);
  try {
    instrument(ast);
  } catch (error) {
    // Only a library whose syntax tree changed gets here: refuse rather than run unmetered.
    return fail(firstLine((error as Error).message));
  }
  const run = program as unknown as (facts: ConditionFacts) => unknown;
  const condition: CompiledCondition = (facts, budget) => metered(budget, run, facts);
  const detectors = detectorsCalled(ast);
  if (detectors.length) condition.detectors = detectors;
  return { ok: true, condition };
}

export type ConditionOutcome = { matched: boolean; error: string | null };

/**
 * Runs a compiled condition within `budget` operations (POLICY_EVAL_BUDGET). Policies fail closed:
 * a condition that fails (a missing field, a type error, the budget spent: `evaluation budget
 * exceeded`) or yields anything but a boolean counts as matched, and says why.
 */
export function runCondition(
  condition: CompiledCondition,
  facts: ConditionFacts,
  budget = DEFAULT_EVAL_BUDGET,
): ConditionOutcome {
  try {
    const value = condition(facts, budget);
    if (typeof value === 'boolean') return { matched: value, error: null };
    return { matched: true, error: `the condition gave ${value === null ? 'null' : typeof value}, not a boolean` };
  } catch (error) {
    return { matched: true, error: firstLine(error instanceof Error ? error.message : String(error)) };
  }
}

export const describePosition = (position: ConditionPosition | null) =>
  position ? `line ${position.line}, column ${position.column}` : null;
