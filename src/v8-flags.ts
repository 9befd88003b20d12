/**
 * The V8 flags that bound the service's memory (decision 0071), NODE_ENV and glibc's arenas: src/main.ts imports this module
 * right after the command line's, and this module starts the process again, in place, with them,
 * before anything else is evaluated.
 *
 * `--max-semi-space-size=16`: V8 sized the main thread's young generation from the machine's memory
 * (128 MB here), and every page of it stays resident once touched. A request's objects die within
 * milliseconds (decision 0057), but 32 requests in flight keep theirs alive across a collection:
 * with 8 MB semi-spaces an operator read cost ~12% more CPU (promoted garbage), with 16 MB as
 * much as with 32, in alternating runs on PostgreSQL (idle 164, 180 and 176–197 MB).
 *
 * `--liftoff-only`, on the embedded database only: WebAssembly (PGlite's PostgreSQL) runs on V8's
 * baseline compiler only. V8 recompiles a hot WebAssembly function with TurboFan, its optimizing
 * compiler, and one function of PGlite's (104 KB of code) takes 600 MB of compiler memory and 1.3 s
 * to compile, on every start: the process's peak was 860 MB on a migrated data directory and
 * 1.25 GB on a first start, and ~70 MB of it stayed. With Liftoff alone the peak is the idle size;
 * the price is PGlite's statements on unoptimized code, about a quarter more CPU per execute
 * (measured 670 against 820–870 µs). On PostgreSQL the only WebAssembly is Prisma's query
 * compiler, small and quick to optimize: it keeps TurboFan.
 *
 * Why a new process image: V8 reads its WebAssembly flags when it starts, `v8.setFlagsFromString`
 * does not change them afterwards (measured), NODE_OPTIONS refuses them, and Worker threads take
 * none of their own. `process.execve` keeps the process id, its environment and its open files
 * (stdout, stderr, a supervisor's pipes). Where it is missing (Windows) the service runs as it is.
 * Flags given on node's own command line come after ours, and win.
 */
const MARKER = '--max-semi-space-size=16';

/*
 * NODE_ENV is `production` unless the environment says otherwise (decision 0077): GraphQL checks
 * every failed type test for a second copy of itself outside production, about a tenth of an
 * operator read's CPU, and Prisma reads the calling source file to quote it in an error. Set here,
 * before the process starts itself again, so that the new image starts with it, before any library
 * reads it.
 */
if (!process.env.NODE_ENV) process.env.NODE_ENV = 'production';

/*
 * MALLOC_ARENA_MAX=2 unless the environment says otherwise: glibc gives each thread that allocates
 * at once an allocation arena of its own, up to eight per core, and keeps what each arena ever held
 * resident. The service has several such threads (the embedded database's, libuv's pool, V8's
 * compiler and collector), and their arenas held ~50 MB that two arenas do not: on PGlite, after
 * setup 384 → 337 MB, after 100,000 executes 448 → 396 MB (issue 44's goal is 400), with the same
 * service CPU per request in alternating runs (decision 0083). glibc reads it once, when the
 * process image starts: hence here, before the image is started again. Other C libraries ignore it.
 */
if (!process.env.MALLOC_ARENA_MAX) process.env.MALLOC_ARENA_MAX = '2';

const embedded = !process.env.DATABASE_URL;
const MEMORY_FLAGS = [MARKER, ...(embedded ? ['--liftoff-only'] : [])];

if (!process.execArgv.includes(MARKER) && typeof process.execve === 'function') {
  process.execve(process.execPath, [process.execPath, ...MEMORY_FLAGS, ...process.execArgv, ...process.argv.slice(1)]);
}
