import type { Logger } from 'pino';
import type { FieldError } from '../errors.js';
import { parseTimestamp, timestampProblem } from '../lib/timestamp.js';
import type { Action, Principal } from '../authz/authz.js';
import type { Services } from './services.js';
import { ReadableStream, Response } from './fetch-api.js';
import type { RequestState } from './request-state.js';
import type { RestRoute } from './rest-routes.js';

/**
 * Streamed REST routes: responses too large to build in memory (exports), which SOFA cannot serve
 * since it answers the JSON of one GraphQL field. They are declared here with their method, path,
 * auth, permission and query parameters; the REST guard (rest-facade.ts) matches them beside the
 * SOFA routes and applies the same steps (404/405, credentials, query check, authorization by the
 * permission table, error envelopes, rate-limit headers) before calling `handle`, and openapi.ts
 * documents them.
 */

export interface StreamParam {
  name: string;
  type: 'string' | 'integer' | 'timestamp';
  /** The allowed values of a string parameter. */
  values?: readonly string[];
  description: string;
}

export type StreamQuery = Record<string, string | number | Date | undefined>;

export interface StreamCall {
  principal: Principal;
  /** The org of the `:org_id` path parameter, else the caller's own org. */
  orgId: string;
  path: Record<string, string>;
  /** Parsed values of the declared query parameters that were given. */
  query: StreamQuery;
  services: Services;
  state: RequestState;
  logger: Logger;
  /** Ends the client's connection abruptly: a stream that fails half-way must not look complete. */
  abort(): void;
}

export interface StreamRoute {
  /** The OpenAPI operationId. */
  operationId: string;
  method: 'GET';
  /** Under /api/v1, with `:name` for path parameters. */
  path: string;
  tag: string;
  summary: string;
  description?: string;
  auth: RestRoute['auth'];
  /**
   * Checked with the permission table: in the org of the `:org_id` path parameter (another org is
   * 404), or, without one, in the caller's own org.
   */
  action: Action;
  query: readonly StreamParam[];
  /** Media types of the 200 response and what each holds. */
  media: Record<string, string>;
  /**
   * A response built whole rather than streamed as an attachment: its 200 has this description
   * and these headers (besides the rate-limit ones) instead of Content-Disposition.
   */
  whole?: { description: string; headers: Record<string, string> };
  /** Error statuses beyond those every route has (as RestRoute's). */
  extraErrors?: RestRoute['extraErrors'];
  /** Validates (throwing AppErrors, answered in the usual envelopes) and returns the streamed response. */
  handle(call: StreamCall): Promise<Response>;
}

/** The declared query parameters, parsed; a bad value is a problem naming the parameter. */
export function parseStreamQuery(url: URL, route: StreamRoute): { query: StreamQuery } | { errors: FieldError[] } {
  const query: StreamQuery = {};
  const errors: FieldError[] = [];
  for (const param of route.query) {
    const values = url.searchParams.getAll(param.name);
    if (!values.length) continue;
    if (values.length > 1) {
      errors.push({ field: param.name, message: 'must be given once' });
      continue;
    }
    const [value] = values;
    if (param.type === 'integer') {
      if (/^-?\d{1,10}$/.test(value) && Math.abs(Number(value)) <= 2 ** 31 - 1) query[param.name] = Number(value);
      else errors.push({ field: param.name, message: 'must be an integer' });
    } else if (param.type === 'timestamp') {
      const date = parseTimestamp(value);
      if (date) query[param.name] = date;
      else errors.push({ field: param.name, message: timestampProblem });
    } else if (param.values && !param.values.includes(value)) {
      errors.push({ field: param.name, message: `must be one of ${param.values.join(', ')}` });
    } else {
      query[param.name] = value;
    }
  }
  return errors.length ? { errors } : { query };
}

const encoder = new TextEncoder();

/**
 * A response body pulled from `chunks`: the next chunk is produced only when the client has taken
 * the previous ones (the stream buffers about one chunk), so a slow reader holds one batch, never
 * the whole export. A failure half-way calls `onError` and errors the stream.
 */
export function streamBody(chunks: AsyncIterable<string>, onError: (error: unknown) => void): ReadableStream {
  const iterator = chunks[Symbol.asyncIterator]();
  return new ReadableStream({
    async pull(controller) {
      try {
        for (;;) {
          const { done, value } = await iterator.next();
          if (done) {
            controller.close();
            return;
          }
          // Each pull must enqueue something or close: an empty pull would stall the stream.
          if (value.length) {
            controller.enqueue(encoder.encode(value));
            return;
          }
        }
      } catch (error) {
        onError(error);
        controller.error(error);
      }
    },
    async cancel() {
      await iterator.return?.();
    },
  });
}

/** A streamed 200 with the media type and a download file name. */
export function streamResponse(
  call: StreamCall,
  chunks: AsyncIterable<string>,
  contentType: string,
  filename: string,
): Response {
  const body = streamBody(chunks, (error) => {
    call.logger.error({ err: error, request_id: call.state.requestId }, 'streamed response failed');
    call.abort();
  });
  return new Response(body, {
    status: 200,
    headers: {
      'Content-Type': contentType,
      'Content-Disposition': `attachment; filename="${filename.replace(/[^A-Za-z0-9._-]/g, '_')}"`,
      'Cache-Control': 'no-store',
    },
  });
}
