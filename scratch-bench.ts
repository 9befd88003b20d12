import { compileCondition } from './src/modules/policy/policy-condition.js';
import { matchPolicies, type ActivePolicy } from './src/modules/policy/policy-rules.js';
import { conditionFacts } from './src/modules/gateway/decision.js';
const conditions = [
  (i: number) => `params.amount > ${1000 + i}`,
  (i: number) => `params.currency == "USD" && params.invoice > ${i}`,
  (i: number) => `"blocked-${i}" in params.customer.tags`,
  (i: number) => `has(params.refund_reason) && params.amount * 2 > ${500 + i}`,
  (i: number) => `params.customer.tier == "bronze-${i}" || request.hour > 24`,
];
const targets: [string[] | null, string[] | null][] = [[null, null], [null, ['billing:*']], [['bench-gateway'], ['*:read']], [['other-agent'], null], [null, ['email:*']]];
const policies: ActivePolicy[] = [];
for (let i = 0; i < 50; i++) {
  const c = i < 4 ? 'params.invoice == 42 && params.customer.tier == "gold"' : conditions[i % 5](i);
  const r = compileCondition(c); if (!r.ok) throw new Error(c);
  const [svcIds, capabilities] = i < 4 ? [null, null] : targets[i % 5];
  policies.push({ id: `p${i}`, name: `p${i}`, version: 1, mode: 'enforce', priority: i, effect: 'deny', svcIds, capabilities, condition: i === 0 ? null : r.condition, rateLimit: null, message: null });
}
const call = { svcId: 'bench-gateway', agentId: 'bench-gateway', action: { type: 'billing', tool: 'read', params: { invoice: 42, amount: 120.5, currency: 'EUR', customer: { tier: 'gold', tags: ['vip'] } } }, capability: 'billing:read', capabilityToken: null, approvalId: null };
const manifest: any = { agent: { name: 'B', version: '1', team: 'b' } };
let n = 0;
const t0 = process.hrtime.bigint();
for (let i = 0; i < 20000; i++) n += matchPolicies(policies, 'bench-gateway', 'billing:read', () => conditionFacts(call, manifest, { id: 'k', prefix: 'p', scopes: [] }, { mode: 'evaluate', channel: 'rest', now: Date.now() })).length;
console.log('µs per request', Number(process.hrtime.bigint() - t0) / 20000 / 1000, n / 20000);
