import { AppError } from '../errors.js';
import { builder } from './builder.js';

builder.scalarType('Timestamp', {
  description: 'ISO 8601 UTC timestamp with milliseconds, e.g. 2026-01-01T00:00:00.000Z',
  serialize: (value) => (value instanceof Date ? value.toISOString() : new Date(value).toISOString()),
  parseValue: (value) => {
    const date = typeof value === 'string' ? new Date(value) : undefined;
    if (!date || Number.isNaN(date.getTime())) throw new AppError('VALIDATION_ERROR', 'Expected an ISO 8601 timestamp');
    return date;
  },
});

builder.scalarType('JSON', {
  description: 'Any JSON value',
  serialize: (value) => value,
  parseValue: (value) => value,
});
