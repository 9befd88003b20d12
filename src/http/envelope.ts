import { GraphQLError } from 'graphql';
import { isDatabaseUnavailable, isMissingReference } from '../db/unavailable.js';
import {
  AppError,
  authErrorCodes,
  errorStatus,
  referenceGone,
  serviceUnavailable,
  type ErrorCode,
  type FieldError,
} from '../errors.js';
import { Response } from '../api/fetch-api.js';

/**
 * The one place that turns errors into the two REST wire envelopes (docs/reference/errors.md):
 * `{"detail": {code, message}}` for 401/403 and `{"error": {code, message, details}}` otherwise.
 */

export interface WireError {
  code: ErrorCode;
  message: string;
  status: number;
  details: Record<string, unknown>;
  headers: Record<string, string>;
}

export function errorBody(error: Pick<WireError, 'code' | 'message' | 'details'>): unknown {
  return authErrorCodes.has(error.code)
    ? { detail: { code: error.code, message: error.message } }
    : { error: { code: error.code, message: error.message, details: error.details } };
}

/** An answer as data: what the edge writes, as a Fetch Response or straight to Node's response (direct-lane.ts). */
export interface PlainAnswer {
  status: number;
  headers: Record<string, string>;
  body: string;
}

export const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';

export function errorAnswer(error: WireError): PlainAnswer {
  return {
    status: error.status,
    headers: { ...error.headers, 'Content-Type': JSON_CONTENT_TYPE },
    body: JSON.stringify(errorBody(error)),
  };
}

/** A JSON answer of a route, 200 unless told. */
export const jsonAnswer = (body: unknown, status = 200): PlainAnswer => ({
  status,
  headers: { 'Content-Type': JSON_CONTENT_TYPE },
  body: JSON.stringify(body),
});

export const responseOf = (answer: PlainAnswer): Response =>
  new Response(answer.body, { status: answer.status, headers: answer.headers });

export function errorResponse(error: WireError): Response {
  // Not Response.json: it sets its own Content-Type, and one given beside it went out as a second header.
  return responseOf(errorAnswer(error));
}

export function wireError(code: ErrorCode, message: string, details: Record<string, unknown> = {}): WireError {
  return { code, message, status: errorStatus[code], details, headers: {} };
}

const variablePattern = /Variable "\$([A-Za-z0-9_]+)"/;

/** Classifies whatever SOFA or GraphQL execution produced. */
export function toWireError(error: unknown): WireError {
  if (error instanceof GraphQLError) {
    // graphql-jit's coercion errors carry no extensions object at all.
    const extensions = (error.extensions ?? {}) as {
      code?: string;
      details?: Record<string, unknown>;
      http?: { status?: number; headers?: Record<string, string> };
    };
    if (extensions.code && extensions.code in errorStatus) {
      const code = extensions.code as ErrorCode;
      return {
        code,
        message: error.message,
        status: errorStatus[code],
        details: extensions.details ?? {},
        headers: extensions.http?.headers ?? {},
      };
    }
    if (extensions.http?.status === 400 && /invalid JSON/i.test(error.message)) {
      return wireError('BAD_REQUEST', 'The request body is not valid JSON');
    }
    // Variable coercion (a missing required argument, a wrong type) fails before any resolver.
    if (!error.originalError || extensions.http?.status === 400) {
      const field = variablePattern.exec(error.message)?.[1] ?? 'body';
      const message = error.message.replace(/^Variable "\$[A-Za-z0-9_]+" /, '');
      const errors: FieldError[] = [{ field, message }];
      return wireError('VALIDATION_ERROR', error.message, { errors });
    }
  }
  if (error instanceof AppError) return wireError(error.code, error.message, error.details);
  if (isDatabaseUnavailable(error)) return toWireError(serviceUnavailable());
  if (isMissingReference(error)) return toWireError(referenceGone());
  return wireError('INTERNAL_ERROR', 'An internal error occurred');
}

/** The answer to a REST route's errors: the most severe decides the status, as with one error. */
export function restErrorAnswer(errors: readonly unknown[]): PlainAnswer {
  const wire = errors.map(toWireError);
  const validation = wire.filter((e) => e.code === 'VALIDATION_ERROR');
  const worst = wire.reduce((a, b) => (b.status > a.status ? b : a));
  if (worst.code === 'VALIDATION_ERROR' && validation.length > 1) {
    const merged = validation.flatMap((e) => (e.details.errors as FieldError[] | undefined) ?? []);
    return errorAnswer({ ...worst, message: 'The request is invalid', details: { errors: merged } });
  }
  return errorAnswer(worst);
}

/** SOFA's error handler: `restErrorAnswer` as a Response. */
export const restErrorHandler = (errors: readonly unknown[]): Response => responseOf(restErrorAnswer(errors));
