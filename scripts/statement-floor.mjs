// What one database round trip costs on this machine, as the service makes them: a pool of
// `poolSize` node-postgres connections (the service's default) and `concurrency` callers each
// sending a trivial prepared statement as soon as the previous one answered, for `seconds`. Run as
// a process of its own (scripts/bench-cost.ts): it prints "ready" once its connections are open,
// measures when a line arrives on stdin, prints one JSON line (the statements it made and its own
// CPU per statement in microseconds, user and system), and closes its connections at the next
// line or the end of stdin. PostgreSQL's CPU for them is measured by its caller, from /proc. A request that needs N statements cannot cost less than N of
// these on either side, whatever the code around them does: the bench's floor rows.
//
//   node scripts/statement-floor.mjs '{"url": "postgresql://…", "seconds": 5, "concurrency": 32, "poolSize": 10}'
import pg from 'pg';

const { url, seconds, concurrency = 32, poolSize = 10 } = JSON.parse(process.argv[2]);
const pool = new pg.Pool({ connectionString: url, max: poolSize });
// Named, as the service's per-call statements are: parsed and planned once per connection.
const statement = { name: 'statement_floor', text: 'SELECT $1::int AS one', values: [1] };

async function loop(until, count) {
  while (performance.now() < until) {
    await pool.query(statement);
    count();
  }
}

/** The next line on stdin (its caller's word), or its end. */
const lines = process.stdin.setEncoding('utf8');
const nextWord = () =>
  new Promise((resolve) => {
    lines.once('data', resolve);
    lines.once('end', resolve);
  });

// Every connection opened and its statement prepared before the measured part; then the caller
// reads PostgreSQL's CPU and says go.
await Promise.all(Array.from({ length: concurrency }, () => loop(performance.now() + 300, () => undefined)));
console.log('ready');
await nextWord();
let statements = 0;
const before = process.cpuUsage();
const until = performance.now() + seconds * 1000;
await Promise.all(Array.from({ length: concurrency }, () => loop(until, () => statements++)));
const used = process.cpuUsage(before);
console.log(JSON.stringify({ statements, clientCpu: (used.user + used.system) / Math.max(1, statements) }));
// The connections stay open until the caller has read PostgreSQL's CPU again: a backend that
// exits takes its CPU time out of /proc.
await nextWord();
await pool.end();
