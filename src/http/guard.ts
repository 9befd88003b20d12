import { maxAliasesRule } from '@escape.tech/graphql-armor-max-aliases';
import { maxDepthRule } from '@escape.tech/graphql-armor-max-depth';
import { MaxTokensParserWLexer } from '@escape.tech/graphql-armor-max-tokens';
import { createComplexityRule } from '@pothos/plugin-complexity';
import {
  getOperationAST,
  GraphQLError,
  Kind,
  Lexer,
  Source,
  TokenKind,
  validate,
  valueFromASTUntyped,
  type DocumentNode,
  type ExecutionArgs,
  type FragmentDefinitionNode,
  type GraphQLErrorOptions,
  type GraphQLField,
  type OperationDefinitionNode,
  type ParseOptions,
  type SelectionSetNode,
  type ValidationRule,
  type ValueNode,
} from 'graphql';
import type { Plugin } from 'graphql-yoga';
import { LRUCache } from 'lru-cache';
import { AppError, authenticationRequired, validationError } from '../errors.js';
import type { ServerContext } from './lifecycle.js';
import type { RequestState } from '../api/request-state.js';
import { findUnstorable } from '../lib/storable-input.js';
import type { AuthState, Principal } from '../authz/authz.js';
import { operationLimits, rateLimitRequests, type CallerClass, type OperationLimits } from '../api/limits.js';

/**
 * The guard of the /graphql endpoint. A document sent there is arbitrary text from anyone, so:
 *
 * 1. the caller is identified first (onParams), before anything is parsed, validated or cached;
 * 2. parsing stops at the caller's token limit (graphql-armor's counting parser), so a huge
 *    document costs no more than a small one to refuse;
 * 3. validation adds the depth and alias limits (graphql-armor) and the storable-input rule for
 *    literals, and turns every problem into a 4xx in the service's envelope;
 * 4. before execution the cost is measured with the variables (@pothos/plugin-complexity, the
 *    cost model in limits.ts), refused over the limit, and counted against the operator rate
 *    limit, once per request.
 *
 * The REST facade runs fixed documents through execute only (SOFA neither parses nor validates),
 * so none of this applies to it: every hook below acts only on requests that passed onParams.
 */

export const GRAPHQL_ENDPOINT = '/graphql';

interface GuardedRequest {
  auth: AuthState;
  callerClass: CallerClass;
  limits: OperationLimits;
  /** The operator rate limit counts each request once: by its cost, or as one if refused earlier. */
  counted: boolean;
}

const guarded = new WeakMap<RequestState, GuardedRequest>();

/** Whether the request came through /graphql (rather than the REST facade). */
export const isGraphQlEndpointRequest = (state: RequestState | undefined): boolean =>
  state !== undefined && guarded.has(state);

const guardedOf = (context: unknown) => {
  const state = (context as { state?: RequestState } | null)?.state;
  return state ? guarded.get(state) : undefined;
};

/** A problem with the document as a whole: 422 VALIDATION_ERROR on `query`, located when known. */
function documentError(message: string, at?: Pick<GraphQLErrorOptions, 'nodes' | 'source' | 'positions'>): AppError {
  return new AppError('VALIDATION_ERROR', message, { details: { errors: [{ field: 'query', message }] }, at });
}

/** graphql-armor words its limits as syntax errors; they are limits of this service. */
const throwLimitError = (_context: unknown, armorError: GraphQLError) => {
  throw documentError(armorError.message.replace(/^Syntax Error: /, ''));
};

/**
 * Errors thrown from parse or validation as an AggregateError reach the response one by one, with
 * their own status: yoga would mark a single GraphQLError as a GraphQL-over-HTTP "spec" error,
 * which it answers 200 to JSON clients. Bad input here is a 4xx like everywhere else.
 */
const reported = (errors: AppError | AppError[]) => new AggregateError(Array.isArray(errors) ? errors : [errors]);

/**
 * graphql-js parses and validates recursively, so nesting costs stack. A document nested deep
 * enough to overflow it (about 1,500 levels) may do so before the parser has read more tokens than
 * the limit, so whether it fails by count or by stack depends on the runtime's frame sizes. The
 * answer does not: a document over the token limit as a whole is refused for that, whatever
 * stopped the parser, and one within it that still overflows nests too deeply.
 */
const tooDeep = () => documentError('The document nests too deeply');

/** Whether the document has more than `limit` tokens: the lexer reads iteratively, without recursion. */
function overTokenLimit(source: string | Source, limit: number): boolean {
  const lexer = new Lexer(typeof source === 'string' ? new Source(source) : source);
  for (let count = 0; count <= limit; count++) {
    if (lexer.advance().kind === TokenKind.EOF) return false;
  }
  return true;
}

function parseWithin(
  source: string | Source,
  options: ParseOptions | undefined,
  limits: OperationLimits,
): DocumentNode {
  const parser = new MaxTokensParserWLexer(source, { ...options, n: limits.tokens, onAccept: [], onReject: [] });
  try {
    return parser.parseDocument();
  } catch (error) {
    // Decided by the count, not by the error: at the deepest point even building the error can overflow.
    const overLimit =
      parser.tokenCount > limits.tokens || (error instanceof RangeError && overTokenLimit(source, limits.tokens));
    if (overLimit) throw reported(documentError(`Token limit of ${limits.tokens} exceeded.`));
    if (error instanceof RangeError) throw reported(tooDeep());
    if (error instanceof GraphQLError) throw reported(new AppError('BAD_REQUEST', error.message, { at: error }));
    throw error;
  }
}

/** Validation rules are cached by name with the document, so each caller class names its own. */
const named = (name: string, rule: ValidationRule): ValidationRule =>
  Object.defineProperty(rule, 'name', { value: name });

/** Literals follow the same edge rule as JSON input (no NUL, no lone surrogate, at most 64 levels). */
function checkLiteral(value: ValueNode, field: string): void {
  const problem = findUnstorable(valueFromASTUntyped(value), field);
  if (problem) throw validationError([problem]);
}

const StorableLiteralsRule = named('StorableLiteralsRule', () => ({
  Argument(node) {
    checkLiteral(node.value, node.name.value);
    return false;
  },
  VariableDefinition(node) {
    if (node.defaultValue) checkLiteral(node.defaultValue, node.variable.name.value);
  },
}));

/** The schema has no subscription type; graphql-js 16 would not say so until execution. */
const SupportedOperationsRule = named('SupportedOperationsRule', (context) => ({
  OperationDefinition(node) {
    if (!context.getSchema().getRootType(node.operation)) {
      context.reportError(documentError(`${node.operation} operations are not supported`, { nodes: node }));
    }
  },
}));

const limitRules = (callerClass: CallerClass): ValidationRule[] => {
  const limits = operationLimits[callerClass];
  return [
    named(
      `MaxDepthRule_${callerClass}`,
      maxDepthRule({ n: limits.depth, ignoreIntrospection: true, onAccept: [], onReject: [throwLimitError] }),
    ),
    named(
      `MaxAliasesRule_${callerClass}`,
      maxAliasesRule({ n: limits.aliases, onAccept: [], onReject: [throwLimitError] }),
    ),
  ];
};

const validationRules: Record<CallerClass, ValidationRule[]> = {
  anonymous: [...limitRules('anonymous'), StorableLiteralsRule, SupportedOperationsRule],
  authenticated: [...limitRules('authenticated'), StorableLiteralsRule, SupportedOperationsRule],
};

/** Every problem of a document is a 4xx in the service's codes, whatever the client accepts. */
const asAppError = (error: Error): AppError =>
  error instanceof AppError ? error : documentError(error.message, error instanceof GraphQLError ? error : undefined);

const variablePattern = /^Variable "\$([A-Za-z0-9_]+)"/;

/** A variable that does not fit its type names the variable; anything else is the document's. */
function asInputError(error: GraphQLError): AppError {
  if (error instanceof AppError) return error;
  const variable = variablePattern.exec(error.message)?.[1];
  if (!variable) return asAppError(error);
  return new AppError('VALIDATION_ERROR', error.message, {
    details: {
      errors: [{ field: `variables.${variable}`, message: error.message.replace(variablePattern, '').trim() }],
    },
  });
}

const noSuchOperation = (operationName: string | null | undefined) =>
  documentError(
    operationName
      ? `The document has no operation named "${operationName}"`
      : 'The document has several operations (or none): name the one to run in operationName',
  );

/**
 * Whether scope-auth guards the field (every root field but sign-up and whether it is open, the
 * logins and refresh_session).
 */
const needsCredentials = (field: GraphQLField<unknown, unknown> | undefined) =>
  (field?.extensions.pothosOptions as { authScopes?: unknown } | undefined)?.authScopes !== undefined;

/** The root fields an operation selects, through fragments. */
function rootFieldNames(
  selectionSet: SelectionSetNode,
  fragments: Map<string, FragmentDefinitionNode>,
  names = new Set<string>(),
) {
  for (const selection of selectionSet.selections) {
    if (selection.kind === Kind.FIELD) names.add(selection.name.value);
    else if (selection.kind === Kind.INLINE_FRAGMENT) rootFieldNames(selection.selectionSet, fragments, names);
    else {
      const fragment = fragments.get(selection.name.value);
      if (fragment) rootFieldNames(fragment.selectionSet, fragments, names);
    }
  }
  return names;
}

/**
 * Without credentials, an operation that asks for anything but sign-up and whether it is open,
 * login, refresh_session and introspection is 401 before its cost is considered: the same order
 * as REST, credentials before the body.
 */
function credentialsProblem(
  args: ExecutionArgs,
  operation: OperationDefinitionNode,
  auth: AuthState,
): AppError | undefined {
  const rootType = args.schema.getRootType(operation.operation);
  if (auth.principal || !rootType) return undefined;
  const fragments = new Map(
    args.document.definitions
      .filter((d): d is FragmentDefinitionNode => d.kind === Kind.FRAGMENT_DEFINITION)
      .map((d) => [d.name.value, d]),
  );
  const fields = rootType.getFields();
  for (const name of rootFieldNames(operation.selectionSet, fragments)) {
    if (needsCredentials(fields[name])) return ('error' in auth && auth.error) || authenticationRequired();
  }
  return undefined;
}

/** The operation's cost with its variables, or why it cannot be measured (variables that do not fit). */
function measureCost(args: ExecutionArgs, operation: OperationDefinitionNode): number | AppError[] {
  let cost = 0;
  const rule = createComplexityRule({
    context: args.contextValue as object,
    variableValues: (args.variableValues ?? {}) as Record<string, unknown>,
    operationName: operation.name?.value,
    onResult: (result) => {
      cost = result.complexity;
    },
  });
  try {
    const errors = validate(args.schema, args.document, [rule]);
    return errors.length ? errors.map(asInputError) : cost;
  } catch (error) {
    // A scalar refusing a literal argument (a malformed timestamp) while arguments are read.
    if (error instanceof AppError) return [error];
    throw error;
  }
}

/**
 * The parse cache of yoga, bounded by the text it holds (an AST takes 40–80 times its text), and
 * no cache of parse errors: refusing a document again costs at most the token limit.
 */
export function boundedDocumentCaches() {
  const documents = new LRUCache<string, DocumentNode>({
    max: 1_000,
    maxSize: 512 * 1024,
    maxEntrySize: 32 * 1024,
    sizeCalculation: (_document, text) => text.length,
  });
  return {
    documentCache: {
      get: (text: string) => documents.get(text),
      set: (text: string, document: DocumentNode) => void documents.set(text, document),
    },
    errorCache: { get: () => undefined, set: () => undefined },
  };
}

export function useGraphQlGuard(deps: {
  identify(request: Request, state: RequestState): Promise<AuthState>;
  /** Counts against the operator rate limit and keeps the quota on the state, for the X-RateLimit headers. */
  countOperatorRequests(principal: Principal, state: RequestState, requests: number): Promise<void>;
}): Plugin<{}, ServerContext> {
  async function count(request: GuardedRequest, state: RequestState, requests: number): Promise<AppError | undefined> {
    const { principal } = request.auth;
    if (!principal || request.counted) return undefined;
    request.counted = true;
    try {
      await deps.countOperatorRequests(principal, state, requests);
      return undefined;
    } catch (error) {
      if (error instanceof AppError) return error;
      throw error;
    }
  }

  return {
    onRequestParse({ url, requestParser, setRequestParser }) {
      if (url.pathname !== GRAPHQL_ENDPOINT || !requestParser) return;
      // yoga JSON.parses `variables` and `extensions` of GET requests and form bodies unguarded.
      setRequestParser(async (request) => {
        try {
          return await requestParser(request);
        } catch (error) {
          if (error instanceof GraphQLError) throw error;
          throw new AppError('BAD_REQUEST', 'The variables and extensions parameters must be JSON objects');
        }
      });
    },

    async onParams({ params, request, context, setResult }) {
      const state = context.state;
      // Shared with the context's authenticate(), so the scope loaders do not read credentials again.
      const auth = await (state.auth ??= deps.identify(request, state));
      const callerClass: CallerClass = auth.principal ? 'authenticated' : 'anonymous';
      guarded.set(state, { auth, callerClass, limits: operationLimits[callerClass], counted: false });
      const problem = findUnstorable(params.variables ?? null, 'variables');
      if (problem) setResult({ errors: [validationError([problem])] });
    },

    onParse({ context, setParseFn }) {
      const request = guardedOf(context);
      if (!request) return;
      setParseFn((source, options) => parseWithin(source, options, request.limits));
      return ({ result, replaceParseResult }) => {
        const operationName = (context as { params?: { operationName?: string } }).params?.operationName;
        if (!(result instanceof Error) && !getOperationAST(result, operationName)) {
          replaceParseResult(reported(noSuchOperation(operationName)));
        }
      };
    },

    onValidate({ context, addValidationRule, validateFn, setValidationFn }) {
      const request = guardedOf(context);
      if (!request) return;
      for (const rule of validationRules[request.callerClass]) addValidationRule(rule);
      setValidationFn((...args) => {
        try {
          return validateFn(...args);
        } catch (error) {
          throw error instanceof RangeError ? reported(tooDeep()) : error;
        }
      });
      return ({ valid, result }) => {
        if (!valid) throw reported(result.map(asAppError));
      };
    },

    async onExecute({ args, setResultAndStopExecution }) {
      const state = (args.contextValue as { state?: RequestState }).state;
      const request = state && guarded.get(state);
      if (!state || !request) return;
      // Found when parsed (onParse); checked again for the type's sake.
      const operation = getOperationAST(args.document, args.operationName);
      if (!operation) return setResultAndStopExecution({ errors: [noSuchOperation(args.operationName)] });
      const unauthenticated = credentialsProblem(args, operation, request.auth);
      if (unauthenticated) return setResultAndStopExecution({ errors: [unauthenticated] });
      const cost = measureCost(args, operation);
      if (typeof cost !== 'number') return setResultAndStopExecution({ errors: cost });
      if (cost > request.limits.cost) {
        return setResultAndStopExecution({
          errors: [
            documentError(
              `The operation's estimated cost of ${cost} exceeds the limit of ${request.limits.cost}: ask for smaller pages (limit) or fewer relations`,
            ),
          ],
        });
      }
      const refused = await count(request, state, rateLimitRequests(cost));
      if (refused) setResultAndStopExecution({ errors: [refused] });
    },

    async onExecutionResult({ context, setResult }) {
      const request = guardedOf(context);
      // Refused before execution (a bad document, variables over a limit): still one request.
      const refused = request && (await count(request, context.state, 1));
      if (refused) setResult({ errors: [refused] });
    },
  };
}
