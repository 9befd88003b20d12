import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Response } from '../api/fetch-api.js';

/**
 * Swagger UI at /docs and ReDoc at /redoc, with their assets served by the service itself so the
 * pages work without access to a CDN, and the service's icon at /favicon.ico, which every page
 * (these, GraphiQL, the console) names. Nothing these pages load comes from another origin.
 * Swagger UI's files come from its npm package (a dependency); ReDoc's bundle from the copy
 * `npm run build` puts in dist/vendor/ (redoc is a dev dependency: with its own dependencies it
 * weighs 80 MB, the bundle 1 MB), or from the package when running from src/.
 */

const require = createRequire(import.meta.url);
const swaggerDir = path.dirname(require.resolve('swagger-ui-dist/package.json'));
/** Two levels up from src/http/ and from dist/http/ alike (the Dockerfile copies it for this). */
const iconFile = fileURLToPath(new URL('../../console/icon.svg', import.meta.url));

/** dist/http/ → dist/vendor/ (scripts/build.mjs); from src/http/ there is none and the package is used. */
function redocBundle(): string {
  const built = fileURLToPath(new URL('../vendor/redoc/redoc.standalone.js', import.meta.url));
  if (existsSync(built)) return built;
  return path.join(path.dirname(require.resolve('redoc/package.json')), 'bundles', 'redoc.standalone.js');
}

/** Where every page finds the icon; browsers that find no declared icon ask for this path anyway. */
export const ICON_PATH = '/favicon.ico';

/**
 * ReDoc's side menu ends with "API docs by Redocly" and the Redocly logo, an image it loads from
 * cdn.redoc.ly (`src:"https://cdn.redoc.ly/redoc/logo-mini.svg"`). Every image source the bundle
 * names on another origin becomes `data:,`, which loads nothing: the image fails and ReDoc's own
 * error handler removes it, leaving the words. (test/docs-pages.e2e.test.ts watches a real
 * browser for requests elsewhere, in case a new ReDoc names it differently.)
 */
const withoutRemoteImages = (bundle: string) => bundle.replace(/\bsrc:"https?:\/\/[^"]*"/g, 'src:"data:,"');

interface Asset {
  /** A path, or a function giving it on the first request (ReDoc's bundle: a build without it still starts). */
  file: string | (() => string);
  type: string;
  /** Applied once, when the file is first read. */
  transform?: (text: string) => string;
}

const assets: Record<string, Asset> = {
  '/docs/swagger-ui.css': { file: path.join(swaggerDir, 'swagger-ui.css'), type: 'text/css' },
  '/docs/swagger-ui-bundle.js': { file: path.join(swaggerDir, 'swagger-ui-bundle.js'), type: 'text/javascript' },
  '/docs/swagger-ui-standalone-preset.js': {
    file: path.join(swaggerDir, 'swagger-ui-standalone-preset.js'),
    type: 'text/javascript',
  },
  '/redoc/redoc.standalone.js': { file: redocBundle, type: 'text/javascript', transform: withoutRemoteImages },
  [ICON_PATH]: { file: iconFile, type: 'image/svg+xml' },
};

const swaggerPage = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Agent Gateway API</title>
  <link rel="icon" type="image/svg+xml" href="${ICON_PATH}">
  <link rel="stylesheet" href="/docs/swagger-ui.css">
</head>
<body>
  <div id="swagger-ui"></div>
  <script src="/docs/swagger-ui-bundle.js"></script>
  <script src="/docs/swagger-ui-standalone-preset.js"></script>
  <script>
    window.ui = SwaggerUIBundle({
      url: '/openapi.json',
      dom_id: '#swagger-ui',
      deepLinking: true,
      displayOperationId: true,
      presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset],
      layout: 'StandaloneLayout',
      // Not sent to validator.swagger.io for its badge (a request to another origin, naming ours).
      validatorUrl: null,
    });
  </script>
</body>
</html>`;

const redocPage = `<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Agent Gateway API</title>
  <meta name="viewport" content="width=device-width, initial-scale=1">
  <link rel="icon" type="image/svg+xml" href="${ICON_PATH}">
</head>
<body>
  <redoc spec-url="/openapi.json"></redoc>
  <script src="/redoc/redoc.standalone.js"></script>
</body>
</html>`;

const cache = new Map<string, Buffer>();

export async function serveDocs(pathname: string, openapi: () => unknown): Promise<Response | undefined> {
  if (pathname === '/openapi.json') return Response.json(openapi());
  if (pathname === '/docs' || pathname === '/docs/') {
    return new Response(swaggerPage, { headers: { 'Content-Type': 'text/html; charset=utf-8' } });
  }
  if (pathname === '/redoc' || pathname === '/redoc/') {
    return new Response(redocPage, { headers: { 'Content-Type': 'text/html; charset=utf-8' } });
  }
  const asset = assets[pathname];
  if (!asset) return undefined;
  let body = cache.get(pathname);
  if (!body) {
    body = await readFile(typeof asset.file === 'string' ? asset.file : asset.file());
    // latin1 both ways keeps every byte as it is; the patterns replaced are ASCII.
    if (asset.transform) body = Buffer.from(asset.transform(body.toString('latin1')), 'latin1');
    cache.set(pathname, body);
  }
  return new Response(new Uint8Array(body), {
    headers: { 'Content-Type': asset.type, 'Cache-Control': 'public, max-age=86400' },
  });
}
