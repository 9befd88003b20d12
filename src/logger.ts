import pino, { type DestinationStream, type Logger } from 'pino';

/** JSON lines on stdout. Credentials are redacted wherever they might appear in a logged object. */
export function createLogger(level: string, destination?: DestinationStream): Logger {
  return pino(
    {
    level,
    base: { service: 'agent-gateway' },
    timestamp: pino.stdTimeFunctions.isoTime,
    redact: {
      paths: [
        'password',
        '*.password',
        'admin_password',
        '*.admin_password',
        'authorization',
        '*.authorization',
        'headers.authorization',
        'headers["x-api-key"]',
        'key',
        '*.key',
        'access_token',
        '*.access_token',
        'token',
        '*.token',
      ],
      censor: '[redacted]',
    },
  },
    destination ?? pino.destination(1),
  );
}
