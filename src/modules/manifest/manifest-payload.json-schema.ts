/** The manifest payload as an OpenAPI 3.0 schema, for the REST document (GraphQL takes it as JSON). */
const capability = { type: 'string', pattern: '^[a-z0-9_.-]+:[a-z0-9_.-]+$', example: 'billing:read' };

export const manifestPayloadSchema = {
  type: 'object',
  required: ['version', 'agent', 'capabilities'],
  properties: {
    version: { type: 'string', example: '1.0' },
    agent: {
      type: 'object',
      required: ['id', 'name', 'version'],
      properties: {
        id: { type: 'string', pattern: '^[a-z0-9]([a-z0-9-]{1,62}[a-z0-9])?$', example: 'billing-agent' },
        name: { type: 'string' },
        version: { type: 'string', example: '1.2.0' },
        description: { type: 'string' },
        organization: { type: 'string' },
        team: { type: 'string' },
      },
    },
    capabilities: {
      type: 'object',
      required: ['requested'],
      properties: { requested: { type: 'array', minItems: 1, uniqueItems: true, items: capability } },
    },
    constraints: {
      type: 'object',
      properties: {
        max_actions_per_hour: { type: 'integer', minimum: 1, default: 100 },
        max_actions_per_day: { type: 'integer', minimum: 1, default: 1000 },
        require_human_approval: { type: 'array', items: capability },
      },
    },
    metadata: {
      type: 'object',
      properties: { contact: { type: 'string' }, documentation: { type: 'string' } },
    },
  },
};
