import { callParts, type CelNode, type ComprehensionArgs, type Evaluate } from './policy-condition-ast.js';
import { alreadyScanned, DETECTORS, type Detector } from './content-detectors.js';
import { deepUnits, elementsOf, shallowUnits, typeUnits } from './policy-condition-units.js';

/**
 * The run-time budget of a condition: every evaluation counts its operations and stops, inside
 * the library's evaluation, at the first one over its budget. `@marcbachmann/cel-js` has no cost
 * limit of its own, so the checked syntax tree is instrumented once, when the condition is
 * compiled:
 * - each operator's and function's `handle` (its implementation, called with the operands
 *   evaluated) first charges the work it is about to do on them (policy-condition-units.ts), so
 *   one call over a large list, map or string is paid for before it runs;
 * - each iteration of a comprehension counts the nodes of its body, an upper bound of what one
 *   run evaluates. Outside bodies a node runs at most once per evaluation and there are at most
 *   300 of them: counting them would only slow the common case;
 * - an error the library swallows and goes on after (a failing iteration of `all`/`exists`, the
 *   left side of `||`/`&&`) is charged as what building it costs, and a `dyn` value given to
 *   `&&`, `||` or `?:` that is not a boolean as what describing it in the error costs;
 * - every loop stops as soon as the budget is spent: a quantifier keeps an error of one iteration
 *   and goes on with the next, as CEL says, and would otherwise fail through a long list.
 * Nothing here imports the library: it works on the tree's shape (policy-condition-ast.ts).
 */

/** The default of POLICY_EVAL_BUDGET: the configuration owns it (src/env.ts). */
export { DEFAULT_EVAL_BUDGET } from '../../env.js';

export const BUDGET_EXCEEDED = 'evaluation budget exceeded';

/** A function call: up to 0.9 µs (timestamp parsing, BigInt results). */
const CALL = 10;
/** A timestamp getter given a time zone: 90 µs (Intl formatting in that zone). */
const TIME_ZONE_CALL = 4_500;
/** An evaluation error: 7 µs for its stack trace, plus its excerpt of the condition (4 µs per 1,000 characters). */
const errorUnits = (conditionLength: number) => 350 + Math.ceil(conditionLength / 5);

const binaryOperators = new Set(['==', '!=', 'in', '+', '-', '*', '/', '%', '<', '<=', '>', '>=']);
const timestampGetters = new Set(
  [
    'Date',
    'DayOfMonth',
    'DayOfWeek',
    'DayOfYear',
    'FullYear',
    'Hours',
    'Milliseconds',
    'Minutes',
    'Month',
    'Seconds',
  ].map((unit) => `get${unit}`),
);

/**
 * The meter of the evaluation under way. Evaluations are synchronous (no function of the
 * environment is async), so one per process is enough: `metered` sets it, the instrumented nodes
 * read it.
 */
let remaining = 0;
let exhausted = false;

class BudgetExceeded extends Error {
  constructor() {
    super(BUDGET_EXCEEDED);
  }
}
/** Thrown at every operation past the budget; one instance, so a loop of failures builds no stack traces. */
const exceeded = new BudgetExceeded();

function charge(operations: number): void {
  if ((remaining -= operations) < 0) {
    exhausted = true;
    throw exceeded;
  }
}

const deep = (value: unknown) => deepUnits(value, remaining);

/** The characters of every string inside a value (map keys too), counted only as far as `cap`. */
function textLength(value: unknown, cap: number): number {
  let total = 0;
  const stack = [value];
  while (stack.length && total <= cap) {
    const current = stack.pop();
    if (typeof current === 'string') total += current.length;
    else if (Array.isArray(current)) stack.push(...current);
    else if (typeof current === 'object' && current !== null)
      for (const [key, item] of Object.entries(current)) {
        total += key.length;
        stack.push(item);
      }
  }
  return total;
}
const isDetector = (name: string): name is Detector => (DETECTORS as readonly string[]).includes(name);
const isObject = (value: unknown) => typeof value === 'object' && value !== null;

/** What an operator charges for its operands before it runs, by operator. */
function operatorCharge(op: string): (left: unknown, right: unknown) => number {
  if (op === '==' || op === '!=') return (left, right) => deep(left) + deep(right);
  // `x in list` compares x with each element: an aggregate x is walked once per element.
  if (op === 'in')
    return (left, right) => deep(right) + typeUnits(left) + (isObject(left) ? deep(left) * elementsOf(right) : 0);
  return (left, right) => shallowUnits(left) + typeUnits(left) + shallowUnits(right) + typeUnits(right);
}

/**
 * What a content detector charges per character of the strings it scans, by detector: measured
 * on prose (secrets 8.8 ns, pii 4.9 ns a character) at ≈20 ns an operation. Hostile text costs
 * more per character (up to ≈200 ns: many candidates); it is charged as prose
 * (docs/decisions/0086-policy-history-and-labels.md says why that is bounded).
 */
const DETECTOR_OPERATIONS_PER_CHARACTER: Record<Detector, number> = { secrets: 0.45, pii: 0.25, hidden_text: 0.05 };

/** What a detector's scan of a value charges: its walk (as any function given an aggregate) and its characters. */
const scanCharge = (detector: Detector, value: unknown, cap: number) => {
  const perCharacter = DETECTOR_OPERATIONS_PER_CHARACTER[detector];
  return CALL + deepUnits(value, cap) + Math.ceil(textLength(value, cap / perCharacter) * perCharacter);
};

/**
 * What a condition that scans content may spend beyond the base budget: one scan by every detector
 * of `content` (the request's params). A budget that did not grow with the content would fail
 * every policy that asks about large params; one that grows by one scan per detector still stops
 * a condition that scans the same large strings again and again.
 */
export const contentAllowance = (content: unknown): number =>
  DETECTORS.reduce((total, detector) => total + scanCharge(detector, content, Number.POSITIVE_INFINITY), 0);

/** What a function call charges for its arguments (the receiver first) before it runs. */
function callCharge(node: CelNode): (args: readonly unknown[]) => number {
  const { name, receiver, args } = callParts(node);
  // A value already scanned in this request answers from its scan (scannedKindsIn).
  if (!receiver && isDetector(name))
    return ([value]) => (alreadyScanned(name, value) ? CALL : scanCharge(name, value, remaining));
  const base = CALL + (receiver && timestampGetters.has(name) && args.length === 1 ? TIME_ZONE_CALL : 0);
  // A list knows its size; a string's size counts code points and a map's its keys.
  if (name === 'size') return ([value]) => base + typeUnits(value) + (Array.isArray(value) ? 0 : shallowUnits(value));
  return (values) => {
    let units = base;
    for (const value of values) units += deep(value);
    return units;
  };
}

type Handle = NonNullable<CelNode['handle']>;

const flatTypes = new Set([
  'bool',
  'int',
  'uint',
  'double',
  'null',
  'string',
  'google.protobuf.Timestamp',
  'google.protobuf.Duration',
]);
/**
 * Statically a scalar or a string: nothing to charge. (Comparing strings stops at the shorter one,
 * and CEL's other operators on them are not linear at all; a `dyn` operand may be a map, which the
 * library walks to learn its type.)
 */
const isFlat = (node: CelNode) => flatTypes.has(node.checkedType?.name ?? '');
const isDyn = (node: CelNode) => node.checkedType?.kind === 'dyn';

/** The node's `handle`, charging its operands first; the arguments' order is the library's per kind of node. */
function chargedHandle(node: CelNode, handle: Handle): Handle | null {
  switch (node.op) {
    case 'call': {
      const units = callCharge(node);
      return (args: unknown[], ast: unknown, ev: unknown) => (charge(units(args)), handle(args, ast, ev));
    }
    case 'rcall': {
      const units = callCharge(node);
      return (args: unknown[], ev: unknown, ast: unknown) => (charge(units(args)), handle(args, ev, ast));
    }
    case 'comprehension':
      // A map's keys are listed before the first iteration; a list is iterated in place.
      return (items: unknown, args: unknown, ev: unknown, ctx: unknown) => (
        charge(Array.isArray(items) ? 0 : shallowUnits(items)), handle(items, args, ev, ctx)
      );
    case '!_':
    case '-_':
      if (isFlat(node.args)) return null;
      return (value: unknown, ast: unknown, ev: unknown) => (charge(typeUnits(value)), handle(value, ast, ev));
    default: {
      if (!binaryOperators.has(node.op) || (node.op !== 'in' && isFlat(node.args[0]) && isFlat(node.args[1])))
        return null;
      const units = operatorCharge(node.op);
      return (left: unknown, right: unknown, ast: unknown, ev: unknown) => (
        charge(units(left, right)), handle(left, right, ast, ev)
      );
    }
  }
}

/** What the node evaluates, as `ASTNode.prototype.evaluate` would resolve it (it replaces itself on first call). */
function resolvedEvaluate(node: CelNode): Evaluate {
  const { alternate, macro, evaluate } = node.meta;
  if (alternate) return (ev, _ast, ctx) => alternate.evaluate(ev, alternate, ctx);
  if (macro) return (ev, _ast, ctx) => macro.evaluate(ev, macro, ctx);
  if (!evaluate)
    throw new Error(`cannot meter the CEL node ${node.op}: the library's syntax tree is not the one this code knows`);
  return evaluate;
}

interface NodeMeter {
  /** Operations counted at each evaluation: a comprehension body's size, else 0. */
  operations: number;
  /** Its errors may be swallowed by the library: charge each. */
  failures: boolean;
  /** A `dyn` operand of `&&`, `||` or `?:`: a value that is not a boolean is described in an error. */
  truth: boolean;
}

function meteredEvaluate(node: CelNode, { operations, failures, truth }: NodeMeter): Evaluate {
  const evaluate = resolvedEvaluate(node);
  const failure = errorUnits(node.input.length);
  return (ev, ast, ctx) => {
    if (operations) charge(operations);
    let value: unknown;
    if (!failures) value = evaluate(ev, ast, ctx);
    else {
      try {
        value = evaluate(ev, ast, ctx);
      } catch (error) {
        if (error !== exceeded) charge(failure);
        throw error;
      }
    }
    if (truth && typeof value !== 'boolean') charge(typeUnits(value));
    return value;
  };
}

/** The nodes a node's evaluation may run, as the library walks them. */
function evaluatedChildren(node: CelNode): unknown[] {
  const { alternate, macro } = node.meta;
  if (alternate) return [alternate];
  if (macro) return [macro.args, macro.val, macro.exp];
  if (node.op !== 'comprehension') return [node.args];
  const { iterable, init, step } = node.args as ComprehensionArgs;
  return [iterable, init, step];
}

const isNode = (value: unknown): value is CelNode =>
  isObject(value) && typeof (value as CelNode).op === 'string' && 'meta' in (value as object);

/** Every node reachable from `root` as the library evaluates it, each once. */
function nodesOf(root: CelNode): Set<CelNode> {
  const nodes = new Set<CelNode>();
  const visit = (value: unknown): void => {
    if (Array.isArray(value)) {
      value.forEach(visit);
      return;
    }
    if (!isNode(value) || nodes.has(value)) return;
    nodes.add(value);
    evaluatedChildren(value).forEach(visit);
  };
  visit(root);
  return nodes;
}

/** The content detectors a condition calls: its budget then grows with the content (contentAllowance). */
export function detectorsCalled(root: CelNode): Detector[] {
  const called = new Set<Detector>();
  for (const node of nodesOf(root)) {
    if (node.op !== 'call' && node.op !== 'rcall') continue;
    const { name } = callParts(node);
    if (isDetector(name)) called.add(name);
  }
  return [...called];
}

/** Which nodes get a metered `evaluate`, and what it does. */
function nodeMeters(root: CelNode): Map<CelNode, NodeMeter> {
  const meters = new Map<CelNode, NodeMeter>();
  const meter = (node: CelNode) => {
    let found = meters.get(node);
    if (!found) meters.set(node, (found = { operations: 0, failures: false, truth: false }));
    return found;
  };
  const inBodies = new Set<CelNode>();
  for (const node of nodesOf(root)) {
    if (node.op === 'comprehension') {
      const { step } = node.args as ComprehensionArgs;
      const body = nodesOf(step);
      body.forEach((inBody) => inBodies.add(inBody));
      Object.assign(meter(step), { operations: body.size, failures: true });
    }
    const operands: CelNode[] =
      node.op === '&&' || node.op === '||' ? node.args : node.op === '?:' ? [node.args[0]] : [];
    for (const operand of operands.filter(isDyn)) meter(operand).truth = true;
  }
  // `||` and `&&` swallow an error of their left side; outside bodies that happens at most once per node.
  for (const node of inBodies) if (node.op === '&&' || node.op === '||') meter(node.args[0]).failures = true;
  return meters;
}

/** Instruments a checked syntax tree, once (see the top of this file). */
export function instrument(root: CelNode): void {
  for (const node of nodesOf(root)) {
    const charged = node.handle && chargedHandle(node, node.handle);
    if (charged) node.handle = charged;
    if (node.op !== 'comprehension') continue;
    const args = node.args as ComprehensionArgs;
    const proceed = args.condition;
    args.condition = proceed ? (accu) => !exhausted && proceed(accu) : () => !exhausted;
  }
  for (const [node, meter] of nodeMeters(root)) node.evaluate = meteredEvaluate(node, meter);
}

/**
 * Runs one evaluation of an instrumented tree within `budget` operations. Over it, the evaluation
 * stops where it is and this throws `evaluation budget exceeded`, whatever the library made of the
 * interruption (a quantifier may even have returned a value).
 */
export function metered<A, T>(budget: number, evaluate: (argument: A) => T, argument: A): T {
  remaining = budget;
  exhausted = false;
  let value: T;
  try {
    value = evaluate(argument);
  } catch (error) {
    if (exhausted) throw new Error(BUDGET_EXCEEDED);
    throw error;
  }
  if (exhausted) throw new Error(BUDGET_EXCEEDED);
  return value;
}
