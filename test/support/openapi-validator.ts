import { readFileSync } from 'node:fs';
import validatorModule from 'openapi-response-validator';

// A CommonJS module whose class is its `default` export: under NodeNext the import is the module.
const OpenAPIResponseValidator = validatorModule.default;
type ResponseValidator = InstanceType<typeof OpenAPIResponseValidator>;
import type { RequestOptions, TestClient, TestResponse } from './app.js';

/**
 * Checks real responses against the served `/openapi.json` with a validator from npm
 * (openapi-response-validator, Ajv underneath; it is given each operation's responses and the
 * document's components), as a generated client would meet them: the status must be
 * documented for the operation, a JSON body must match its schema (nulls included), and the
 * documented headers must be there. Wrap a test client with `validating()` and every response it
 * gets is checked; `covered` collects the operations that answered 2xx.
 */

function lazily<T>(make: () => T): () => T {
  let made: T | undefined;
  return () => (made ??= make());
}

const COMPONENT_REF = /^#\/components\/([^/]+)\/([^/]+)$/;

/**
 * The document's components that `value` refers to, directly or through each other. The validator
 * copies and compiles every component it is given with each response schema (about 60 ms an
 * operation with all 100 schemas, 8 s of the security matrix's run); the ones an operation can
 * reach validate the same.
 */
function referencedComponents(value: unknown, document: Json): Json {
  const components: Json = {};
  const visit = (node: unknown): void => {
    // Arrays too: their entries are their items.
    if (typeof node !== 'object' || node === null) return;
    for (const [key, child] of Object.entries(node)) {
      const ref = key === '$ref' && typeof child === 'string' ? COMPONENT_REF.exec(child) : null;
      if (!ref) {
        visit(child);
        continue;
      }
      const [, kind, name] = ref;
      if (components[kind]?.[name] !== undefined) continue;
      const target = document.components?.[kind]?.[name];
      if (target === undefined) continue;
      (components[kind] ??= {})[name] = target;
      visit(target);
    }
  };
  visit(value);
  return components;
}

export interface ResponseProblem {
  operation: string;
  status: number;
  problem: string;
}

type Json = Record<string, any>;

interface Operation {
  id: string;
  method: string;
  pattern: RegExp;
  responses: Record<string, { content?: Record<string, unknown>; headers?: Record<string, { required?: boolean }> }>;
  /** Compiled on first use: most tests meet a few operations of the ~150. */
  validator: () => ResponseValidator;
}

let committedDocument: Json | undefined;

export class OpenApiResponseChecker {
  readonly covered = new Set<string>();

  private constructor(private readonly operationList: Operation[]) {}

  /** Checks against the document a service serves at /openapi.json. */
  static async load(client: TestClient): Promise<OpenApiResponseChecker> {
    const served = await client.request<Json>('GET', '/openapi.json');
    if (served.status !== 200) throw new Error(`GET /openapi.json answered ${served.status}`);
    return OpenApiResponseChecker.of(served.body);
  }

  /**
   * Checks against the committed schema/openapi.json, read once per test file. The service serves
   * that document, its servers aside (test/contracts.test.ts fails otherwise), and reading it spares
   * every test app the second of CPU that building the document costs.
   */
  static committed(): OpenApiResponseChecker {
    committedDocument ??= JSON.parse(readFileSync(new URL('../../schema/openapi.json', import.meta.url), 'utf8'));
    return OpenApiResponseChecker.of(committedDocument!);
  }

  private static of(document: Json): OpenApiResponseChecker {
    const operations: Operation[] = [];
    for (const [path, methods] of Object.entries<Json>(document.paths)) {
      // Literal segments first, so /records/export is not taken for /records/{record_id}.
      const source = path.replace(/[.*+?^$()|[\]\\]/g, '\\$&').replace(/\{[^}]+\}/g, '[^/]+');
      for (const [method, operation] of Object.entries<Json>(methods)) {
        const responses = Object.fromEntries(
          Object.entries<Json>(operation.responses).map(([status, response]) => [
            status,
            { ...response, schema: response.content?.['application/json']?.schema },
          ]),
        );
        operations.push({
          id: operation.operationId,
          method: method.toUpperCase(),
          pattern: new RegExp(`^${source}$`),
          responses: operation.responses,
          validator: lazily(
            () => new OpenAPIResponseValidator({ responses, components: referencedComponents(responses, document) }),
          ),
        });
      }
    }
    const params = (op: Operation) => (op.pattern.source.match(/\[\^\/\]\+/g) ?? []).length;
    operations.sort((a, b) => params(a) - params(b));
    return new OpenApiResponseChecker(operations);
  }

  /** Every operationId of the document. */
  operations(): string[] {
    return this.operationList.map((operation) => operation.id);
  }

  /** The operationId that serves `method path`, if the document has one. */
  operationOf(method: string, path: string): string | undefined {
    return this.find(method, path)?.id;
  }

  private find(method: string, path: string): Operation | undefined {
    const { pathname } = new URL(path, 'http://localhost');
    return this.operationList.find((op) => op.method === method.toUpperCase() && op.pattern.test(pathname));
  }

  /** What is wrong with this response of `method path`; an empty list when nothing is, or no operation matches. */
  check(method: string, path: string, response: TestResponse): ResponseProblem[] {
    const operation = this.find(method, path);
    if (!operation) return [];
    const problems: ResponseProblem[] = [];
    const fail = (problem: string) => problems.push({ operation: operation.id, status: response.status, problem });
    const entry = operation.responses[String(response.status)];
    if (!entry) {
      fail(`status ${response.status} is not documented (documented: ${Object.keys(operation.responses).join(', ')})`);
      return problems;
    }
    const contentType = response.headers.get('content-type');
    if (contentType?.includes(',')) fail(`Content-Type is sent more than once: ${contentType}`);
    if (entry.content) {
      const media = contentType?.split(';')[0].trim() ?? '';
      if (!Object.keys(entry.content).includes(media)) fail(`content type ${contentType} is not documented`);
      else if (media === 'application/json') {
        const result = operation.validator().validateResponse(String(response.status), response.body);
        for (const error of result?.errors ?? []) fail(`body${error.path ? `.${error.path}` : ''}: ${error.message}`);
      }
    }
    for (const [name, header] of Object.entries(entry.headers ?? {})) {
      if (header.required && response.headers.get(name) === null)
        fail(`header ${name} is documented as required but missing`);
    }
    // A success: a 2xx, or the redirect an operation answers instead (the OAuth authorization endpoint).
    if (!problems.length && response.status < 400) this.covered.add(operation.id);
    return problems;
  }

  /** A client whose every response is checked; a problem fails the request's test at once. */
  validating(client: TestClient): TestClient {
    return {
      request: async <T>(method: string, path: string, options?: RequestOptions): Promise<TestResponse<T>> => {
        const response = await client.request<T>(method, path, options);
        const problems = this.check(method, path, response);
        if (problems.length) {
          throw new Error(
            `${method} ${path} → ${response.status} does not match /openapi.json:\n${problems.map((p) => `  ${p.problem}`).join('\n')}`,
          );
        }
        return response;
      },
    };
  }
}
