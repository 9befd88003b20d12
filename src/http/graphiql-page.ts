/**
 * GraphiQL at GET /graphql (browsers: `Accept: text/html`), instead of yoga's own plugin, which
 * renders the page again for every request and sends its 9 MB uncompressed and uncached.
 *
 * The page is rendered once, on its first request (its renderer, which holds GraphiQL's 10 MB
 * bundle as a string and its source, about 28 MB of the heap, is loaded then, not at start), and each encoding is compressed once, on the
 * first request that asks for it (brotli, else gzip, after `Accept-Encoding`; identity otherwise),
 * on zlib's thread pool; then the bytes are kept. Every answer carries a strong `ETag` per
 * encoding and `Cache-Control: no-cache`: a browser keeps the page and revalidates it, so a
 * revisit is a 304 without a body, and a new version of the service is seen at once.
 * `Vary: Accept, Accept-Encoding`, since the same URL answers GraphQL GETs with JSON.
 */
import { createHash } from 'node:crypto';
import { promisify } from 'node:util';
import { brotliCompress, constants, gzip } from 'node:zlib';
import type { GraphiQLOptions, Plugin } from 'graphql-yoga';
import { GRAPHQL_ENDPOINT } from './guard.js';
import { ICON_PATH } from './docs.js';
import { Response } from '../api/fetch-api.js';
import { currentRequest } from './request-state.js';

/** The document GraphiQL opens with: how to get a token and where it goes, then queries to run. */
export const GRAPHIQL_DEFAULT_QUERY = `# Agent Gateway: the GraphQL API (the REST API under /api/v1 is the same schema, see /docs).
#
# Without credentials only sign-up (create_organization), login and introspection answer.
# 1. Run "Login" (the ▶ button) with your email and password. No org yet? Sign up first:
#    curl -XPOST <this server>/api/v1/orgs -H 'content-type: application/json' -d '{"name": "Acme",
#      "slug": "acme", "admin_email": "ops@acme.example", "admin_password": "a long passphrase"}'
# 2. Copy access_token from the answer into the Headers tab below (valid 1 hour):
#      {"Authorization": "Bearer <access_token>"}
#    An agent's API key goes there instead as {"X-API-Key": "agw_…"}.
# 3. Run "Agents" or "Records"; the Docs panel (top left) lists every query and mutation.

mutation Login {
  login(email: "ops@acme.example", password: "a long passphrase") {
    access_token
    expires_in
    user { email role org_id }
  }
}

query Agents {
  agents(limit: 10) {
    total
    items { agent_id name status }
  }
}

query Records {
  records(limit: 10) {
    total
    items { record_id created_at svc_id capability decision reasons { code message } }
  }
}
`;

export const GRAPHIQL_OPTIONS: GraphiQLOptions = {
  title: 'Agent Gateway GraphiQL',
  // The service's icon instead of Yoga's (every page of the service names the same one).
  favicon: ICON_PATH,
  defaultQuery: GRAPHIQL_DEFAULT_QUERY,
  // The headers editor open: step 2 above happens there.
  defaultEditorToolsVisibility: 'headers',
};

type Encoding = 'br' | 'gzip' | 'identity';

/**
 * The encoding to send for an `Accept-Encoding` header: the acceptable one (q > 0) with the
 * highest q, brotli before gzip before identity on a tie. Identity not named (nor by `*`) is
 * acceptable but comes last; if everything is refused it is sent anyway.
 */
export function chooseEncoding(header: string | null): Encoding {
  const q = new Map<string, number>();
  for (const part of (header ?? '').split(',')) {
    const [name, ...params] = part.trim().toLowerCase().split(';');
    if (!name) continue;
    const qParam = params.map((p) => p.trim()).find((p) => p.startsWith('q='));
    const value = qParam ? Number(qParam.slice(2)) : 1;
    q.set(name, Number.isFinite(value) ? value : 0);
  }
  const quality = (name: Encoding) => q.get(name) ?? q.get('*') ?? (name === 'identity' ? 0.001 : 0);
  let best: Encoding | undefined;
  for (const name of ['br', 'gzip', 'identity'] as const) {
    if (quality(name) > 0 && (best === undefined || quality(name) > quality(best))) best = name;
  }
  return best ?? 'identity';
}

interface Representation {
  body: Uint8Array;
  etag: string;
}

/** ETags of If-None-Match (weak comparison: `W/` ignored); `*` matches any. */
function matches(ifNoneMatch: string, etag: string): boolean {
  return ifNoneMatch.split(',').some((tag) => {
    const t = tag.trim();
    return t === '*' || t.replace(/^W\//, '') === etag;
  });
}

export function useGraphiQLPage(options: GraphiQLOptions = GRAPHIQL_OPTIONS): Plugin {
  let html: Promise<{ bytes: Buffer; hash: string }> | undefined;
  const representations = new Map<Encoding, Promise<Representation>>();
  const render = async () => {
    const { renderGraphiQL } = await import('@graphql-yoga/render-graphiql');
    const bytes = Buffer.from(renderGraphiQL(options));
    return { bytes, hash: createHash('sha256').update(bytes).digest('base64url').slice(0, 22) };
  };
  const page = () => {
    html ??= render();
    // A failure is not kept: the next request tries again.
    html.catch(() => {
      html = undefined;
    });
    return html;
  };
  const compress = (encoding: Encoding, bytes: Buffer): Promise<Uint8Array> =>
    encoding === 'br'
      ? promisify(brotliCompress)(bytes, {
          params: {
            // Quality 6: within 3% of quality 9's size at a third of its time (and 11 takes 50 times as long).
            [constants.BROTLI_PARAM_QUALITY]: 6,
            [constants.BROTLI_PARAM_MODE]: constants.BROTLI_MODE_TEXT,
            [constants.BROTLI_PARAM_SIZE_HINT]: bytes.length,
          },
        })
      : encoding === 'gzip'
        ? promisify(gzip)(bytes, { level: 6 })
        : Promise.resolve(bytes);
  const representation = (encoding: Encoding): Promise<Representation> => {
    let made = representations.get(encoding);
    if (!made) {
      made = page().then(async ({ bytes, hash }) => ({
        body: await compress(encoding, bytes),
        etag: encoding === 'identity' ? `"${hash}"` : `"${hash}-${encoding}"`,
      }));
      // A failure is not kept: the next request tries again.
      made.catch(() => representations.delete(encoding));
      representations.set(encoding, made);
    }
    return made;
  };

  return {
    async onRequest({ request, url, endResponse }) {
      if (request.method !== 'GET' || url.pathname !== GRAPHQL_ENDPOINT) return;
      if (!request.headers.get('accept')?.includes('text/html')) return;
      // Its own route pattern in logs, metrics and spans, as the other fixed paths have.
      const state = currentRequest();
      if (state) state.route = `GET ${GRAPHQL_ENDPOINT}`;
      const encoding = chooseEncoding(request.headers.get('accept-encoding'));
      const { body, etag } = await representation(encoding);
      const headers: Record<string, string> = {
        'Cache-Control': 'no-cache',
        ETag: etag,
        Vary: 'Accept, Accept-Encoding',
      };
      const ifNoneMatch = request.headers.get('if-none-match');
      if (ifNoneMatch && matches(ifNoneMatch, etag)) {
        endResponse(new Response(null, { status: 304, headers }));
        return;
      }
      if (encoding !== 'identity') headers['Content-Encoding'] = encoding;
      headers['Content-Type'] = 'text/html; charset=utf-8';
      headers['Content-Length'] = String(body.length);
      endResponse(new Response(body as Uint8Array<ArrayBuffer>, { status: 200, headers }));
    },
  };
}
