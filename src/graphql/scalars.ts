import { AppError } from '../errors.js';
import { parseTimestamp, timestampProblem } from '../lib/timestamp.js';
import { builder } from './builder.js';

builder.scalarType('Timestamp', {
  description: 'ISO 8601 UTC timestamp with milliseconds, e.g. 2026-01-01T00:00:00.000Z',
  serialize: (value) => (value instanceof Date ? value.toISOString() : new Date(value).toISOString()),
  parseValue: (value) => {
    const date = parseTimestamp(value);
    if (!date) throw new AppError('VALIDATION_ERROR', `Timestamp ${timestampProblem}`);
    return date;
  },
});

builder.scalarType('JSON', {
  description: 'Any JSON value',
  serialize: (value) => value,
  parseValue: (value) => value,
});
