/**
 * The parts of `@marcbachmann/cel-js`'s syntax tree (lib/parser.js `ASTNode`, 8.x) that the cost
 * rules read: the library exports no types for it. A node is `{op, args, pos, start, end, input}`;
 * `meta.alternate` is what a macro such as `all` expands to (a `comprehension` node), `meta.macro`
 * the state of `has()` and `cel.bind()`; `checkedType` is set by the type check and `handle` (the
 * operator's or function's implementation on this node) by it too. The budget's unit tests fail if
 * a new version of the library changes any of this.
 */

export type Evaluate = (ev: unknown, ast: CelNode, ctx: unknown) => unknown;

export interface CelType {
  kind: string;
  name: string;
}

export interface CelMacro {
  evaluate: (ev: unknown, macro: CelMacro, ctx: unknown) => unknown;
  /** has(): the field path. */
  args?: CelNode[];
  /** cel.bind(var, val, exp). */
  var?: string;
  val?: CelNode;
  exp?: CelNode;
}

/** The arguments of a `comprehension` node (lib/macros.js); `condition` ends the loop when it returns false. */
export interface ComprehensionArgs {
  iterable: CelNode;
  iterVarName: string;
  init: CelNode;
  step: CelNode;
  condition?: (accu: unknown) => boolean;
}

export interface CelNode {
  op: string;
  // The shape depends on `op`: a literal, a name, child nodes, map entries or ComprehensionArgs.
  // biome-ignore lint/suspicious/noExplicitAny: the library types it so; each reader narrows it by op
  args: any;
  pos: number;
  start: number;
  end: number;
  input: string;
  readonly meta: { alternate?: CelNode; macro?: CelMacro; evaluate?: Evaluate };
  checkedType?: CelType;
  evaluate: Evaluate;
  // biome-ignore lint/suspicious/noExplicitAny: the library's handlers take op-specific arguments
  handle?: (...args: any[]) => unknown;
}

/** Macros that loop over a list or a map's keys. */
export const comprehensionMacros = new Set(['all', 'exists', 'exists_one', 'map', 'filter']);

/** A call's name, receiver (method form) and arguments as written. */
export function callParts(node: CelNode): { name: string; receiver: CelNode | null; args: CelNode[] } {
  return node.op === 'rcall'
    ? { name: node.args[0], receiver: node.args[1], args: node.args[2] }
    : { name: node.args[0], receiver: null, args: node.args[1] };
}

/** The source of a node, shortened for a message. */
export function sourceOf(node: CelNode): string {
  const text = node.input.slice(node.start, node.end).replace(/\s+/g, ' ');
  return text.length > 40 ? `${text.slice(0, 39)}…` : text;
}
