import type { ApiModule } from '../../api/api-module.js';
import { auditOperations, auditStreams } from './audit.graphql.js';

export const auditModule: ApiModule = {
  name: 'audit',
  operations: auditOperations,
  streams: auditStreams,
};
