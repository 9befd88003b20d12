import { GraphQLError } from 'graphql';
import { AppError, errorStatus, type ErrorCode } from '../../src/errors.js';

/** Frames in an error's stack: the lines after its first ("AppError: message"). */
const framesOf = (error: Error) => (error.stack ?? '').split('\n').slice(1).length;

describe('AppError', () => {
  const codes = Object.keys(errorStatus) as ErrorCode[];

  test.each(codes.filter((code) => errorStatus[code] < 500))(
    '%s, a client error, is made without capturing a stack',
    (code) => {
      const error = new AppError(code, 'refused');
      expect(error).toBeInstanceOf(GraphQLError);
      expect(error.stack).toBe('AppError: refused');
      expect(framesOf(error)).toBe(0);
      expect({ code: error.code, status: error.status, extensions: error.extensions.code }).toEqual({
        code,
        status: errorStatus[code],
        extensions: code,
      });
    },
  );

  test.each(codes.filter((code) => errorStatus[code] >= 500))('%s keeps its stack for the log', (code) => {
    const error = new AppError(code, 'failed');
    expect(framesOf(error)).toBeGreaterThan(0);
    expect(error.stack).toContain('app-error.test');
  });

  test("the process's stack trace limit is as it was, for every other error", () => {
    const before = Error.stackTraceLimit;
    new AppError('NOT_FOUND', 'gone');
    new AppError('INTERNAL_ERROR', 'failed');
    expect(Error.stackTraceLimit).toBe(before);
    expect(framesOf(new Error('plain'))).toBeGreaterThan(0);
  });
});
