import { callParts, comprehensionMacros, sourceOf, type CelNode } from './policy-condition-ast.js';

/**
 * The save-time cost rules of a condition: a static estimate, over the checked syntax tree, of how
 * its cost grows with n, the size of the request's data (`params`, `action`, `agent`). Every
 * operator and function costs O(1) or O(n); a comprehension (`all`, `exists`, `exists_one`, `map`,
 * `filter`) repeats its body once per element of its range. So a condition is linear unless a
 * body that runs n times does O(n) work on each run: walks data that is the same on every
 * iteration (loop-invariant), or loops again. Those conditions are refused, naming the construct.
 *
 * What a body may do with data derived from its iteration variable is not limited: the elements
 * add up to the data once. Comparisons (`==`, `<`…), arithmetic and the numeric conversions are
 * accepted on loop-invariant operands, because a value typed `dyn` (everything under `params`) is
 * normally a scalar there and nothing at save time can prove otherwise; what they would cost on a
 * large aggregate is charged by the run-time budget (policy-condition-budget.ts), which fails the
 * evaluation closed. The rules refuse only what is linear by nature (scanning a list, searching a
 * string, copying) or statically typed as an aggregate.
 */

export interface CostRefusal {
  message: string;
  /** Offset of the construct in the condition. */
  offset: number;
}

/**
 * How big a value can be: `bounded` whatever the request; `item` derived from the iteration
 * variable of the enclosing loop (its sizes over all iterations add up to the data once);
 * `data` as big as the request's data and the same on every iteration.
 */
type Size = 'bounded' | 'item' | 'data';

interface Loop {
  macro: string;
  variable: string;
}

interface Scope {
  variables: ReadonlyMap<string, Size>;
  /** The comprehension whose body this is, when its range grows with the data; else null. */
  loop: Loop | null;
}

/**
 * The declared variables: `request` is the gateway's own (a time, two small integers, two names),
 * `key` an API key's id, prefix and scopes (names from a closed list). The rest come from the
 * caller's request or the org's manifest: as big as they are allowed to be.
 */
const variableSizes: Record<string, Size> = {
  request: 'bounded',
  key: 'bounded',
  agent: 'data',
  action: 'data',
  params: 'data',
};

const scalarTypes = new Set([
  'bool',
  'int',
  'uint',
  'double',
  'null',
  'type',
  'google.protobuf.Timestamp',
  'google.protobuf.Duration',
]);
const isScalar = (node: CelNode) => scalarTypes.has(node.checkedType?.name ?? '');
const isAggregate = (node: CelNode) => node.checkedType?.kind === 'list' || node.checkedType?.kind === 'map';
const isSequence = (node: CelNode) =>
  node.checkedType?.kind === 'list' || node.checkedType?.name === 'string' || node.checkedType?.name === 'bytes';

/**
 * Functions whose cost does not grow with a loop-invariant argument in the ordinary case: scalar
 * conversions and reflection. (On an aggregate the library still walks it; the budget charges that.)
 */
const flatCostFunctions = new Set(['int', 'uint', 'double', 'bool', 'timestamp', 'dyn', 'type']);

const binaryOperators = new Set(['==', '!=', 'in', '+', '-', '*', '/', '%', '<', '<=', '>', '>=']);

const join = (...sizes: Size[]): Size =>
  sizes.includes('data') ? 'data' : sizes.includes('item') ? 'item' : 'bounded';

class Refused extends Error {
  constructor(
    message: string,
    readonly offset: number,
  ) {
    super(message);
  }
}

const quadratic = (loop: Loop) =>
  `inside \`${loop.macro}\` is not allowed: it does not come from \`${loop.variable}\`, so every iteration goes through all of it again and the cost grows with the square of the params`;

function refuseInLoop(operand: CelNode, construct: string, loop: Loop): never {
  throw new Refused(`${construct} \`${sourceOf(operand)}\` ${quadratic(loop)}`, operand.start);
}

function binarySize(node: CelNode, scope: Scope): Size {
  const [left, right] = node.args as [CelNode, CelNode];
  const sizes = [sizeOf(left, scope), sizeOf(right, scope)];
  const { loop } = scope;
  if (loop) {
    const invariant = (i: 0 | 1) => sizes[i] === 'data';
    // A list is scanned (a map typed as such is looked up); a dyn map has its keys listed to learn its type.
    if (node.op === 'in' && invariant(1) && right.checkedType?.kind !== 'map') refuseInLoop(right, '`in` over', loop);
    const compared = node.op === 'in' ? [0] : node.op === '==' || node.op === '!=' ? [0, 1] : [];
    const operands = [left, right];
    for (const i of [0, 1] as const) {
      if (!invariant(i)) continue;
      if (compared.includes(i) && isAggregate(operands[i]))
        refuseInLoop(operands[i], `\`${node.op}\` on the list or map`, loop);
      if (node.op === '+' && (isSequence(operands[i]) || isSequence(node)))
        refuseInLoop(operands[i], 'concatenating (`+`)', loop);
    }
  }
  return isScalar(node) ? 'bounded' : join(...sizes);
}

/** `all`, `exists`, `exists_one`, `map`, `filter`: the body runs once per element of the range. */
function comprehensionSize(node: CelNode, scope: Scope): Size {
  const { name, receiver, args } = callParts(node);
  if (scope.loop) {
    throw new Refused(
      `\`${name}\` inside another comprehension is not allowed: its cost grows with the square of the params`,
      node.start,
    );
  }
  const range = sizeOf(receiver!, scope);
  const variable = args[0].args as string;
  const variables = new Map(scope.variables).set(variable, range === 'bounded' ? 'bounded' : 'item');
  // A range of bounded size (a list literal) repeats its body a bounded number of times.
  const loop = range === 'bounded' ? null : { macro: name, variable };
  const bodies = args.slice(1).map((body) => sizeOf(body, { variables, loop }));
  if (name === 'all' || name === 'exists' || name === 'exists_one') return 'bounded';
  if (name === 'filter') return range;
  const transform = bodies[bodies.length - 1];
  if (loop && transform === 'data') {
    throw new Refused(
      `\`map\` yielding \`${sourceOf(args[args.length - 1])}\`, which does not come from \`${variable}\`, is not allowed: it builds a list of n copies of data the size of the params, and whatever reads it costs the square of the params`,
      args[args.length - 1].start,
    );
  }
  return join(range, transform === 'item' ? 'data' : transform);
}

function callSize(node: CelNode, scope: Scope): Size {
  const { alternate, macro } = node.meta;
  if (alternate?.op === 'comprehension' && comprehensionMacros.has(node.args[0])) return comprehensionSize(node, scope);
  if (macro?.exp && macro.val && macro.var) {
    // cel.bind(var, val, exp): the variable is as big as its value.
    const variables = new Map(scope.variables).set(macro.var, sizeOf(macro.val, scope));
    return sizeOf(macro.exp, { ...scope, variables });
  }
  const { name, receiver, args } = callParts(node);
  if (macro && name === 'has') return 'bounded';
  const operands = receiver ? [receiver, ...args] : args;
  if (name === 'duration' && operands.some((operand) => operand.op !== 'value')) {
    throw new Refused(
      '`duration` of anything but a string literal is not allowed: parsing a crafted string takes time that grows with the cube of its length',
      node.start,
    );
  }
  const sizes = operands.map((operand) => sizeOf(operand, scope));
  const { loop } = scope;
  if (loop) {
    const flat = flatCostFunctions.has(name) || (name === 'size' && operands[0].checkedType?.kind === 'list');
    const invariant = operands.find((_operand, i) => sizes[i] === 'data');
    if (invariant && !flat) refuseInLoop(invariant, `\`${name}\` with`, loop);
  }
  return isScalar(node) ? 'bounded' : join(...sizes);
}

function sizeOf(node: CelNode, scope: Scope): Size {
  switch (node.op) {
    case 'value':
      return 'bounded';
    case 'id':
      // Constants (`cel`, `google`) are replaced by their value.
      if (node.meta.alternate) return 'bounded';
      return scope.variables.get(node.args) ?? variableSizes[node.args] ?? 'data';
    case '.':
    case '.?':
      return isScalar(node) ? 'bounded' : sizeOf(node.args[0], scope);
    case '[]':
    case '[?]':
      sizeOf(node.args[1], scope);
      return isScalar(node) ? 'bounded' : sizeOf(node.args[0], scope);
    case '!_':
    case '-_':
      sizeOf(node.args, scope);
      return 'bounded';
    case '&&':
    case '||':
      for (const operand of node.args as CelNode[]) sizeOf(operand, scope);
      return 'bounded';
    case '?:':
      sizeOf(node.args[0], scope);
      return join(sizeOf(node.args[1], scope), sizeOf(node.args[2], scope));
    case 'list':
      return join(...(node.args as CelNode[]).map((element) => sizeOf(element, scope)));
    case 'map':
      return join(
        ...(node.args as [CelNode, CelNode][]).flatMap(([key, value]) => [sizeOf(key, scope), sizeOf(value, scope)]),
      );
    case 'call':
    case 'rcall':
      return callSize(node, scope);
    default:
      if (binaryOperators.has(node.op)) return binarySize(node, scope);
      // Nothing else is produced by the parser; should a new version add a construct, it counts as data.
      return 'data';
  }
}

const isNode = (value: unknown): value is CelNode =>
  typeof value === 'object' && value !== null && typeof (value as CelNode).op === 'string';

/**
 * A regular expression (`matches`, as a method or a function): refused before the type check,
 * which knows no function form and would word it as a type error.
 */
export function regularExpression(node: unknown): CostRefusal | null {
  if (Array.isArray(node)) {
    for (const child of node) {
      const found = regularExpression(child);
      if (found) return found;
    }
    return null;
  }
  if (!isNode(node)) return null;
  if ((node.op === 'call' || node.op === 'rcall') && node.args[0] === 'matches') {
    return {
      message: 'regular expressions (`matches`) are not allowed: they can take exponential time on crafted input',
      offset: node.start,
    };
  }
  return regularExpression(node.args);
}

/** The first construct whose cost grows faster than linearly with the params, or null. */
export function superLinearConstruct(ast: CelNode): CostRefusal | null {
  try {
    sizeOf(ast, { variables: new Map(), loop: null });
    return null;
  } catch (error) {
    if (error instanceof Refused) return { message: error.message, offset: error.offset };
    throw error;
  }
}
