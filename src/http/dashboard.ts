import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { extname } from 'node:path';
import type { Hono } from 'hono';
import type { AppEnv } from './env.js';

/** The dashboard's files: plain HTML, CSS and JS shipped in the package, no build step. */
const DASHBOARD_DIR = new URL('../../dashboard/', import.meta.url);
const TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
};
// Scripts from this server only, no inline code: whatever a payload holds cannot run.
const CSP =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'";

/** name → [content type, body]: read once, when the app is made. */
function loadAssets(): Map<string, [string, Buffer]> {
  const assets = new Map<string, [string, Buffer]>();
  for (const name of readdirSync(DASHBOARD_DIR)) {
    const type = TYPES[extname(name)];
    if (type) assets.set(name, [type, readFileSync(new URL(name, DASHBOARD_DIR))]);
  }
  // the chart library, from its npm package
  const require = createRequire(import.meta.url);
  for (const file of ['uPlot.iife.min.js', 'uPlot.min.css']) {
    const type = TYPES[extname(file)] as string;
    assets.set(file, [type, readFileSync(require.resolve(`uplot/dist/${file}`))]);
  }
  return assets;
}

/**
 * Serves the dashboard at `/` (its pages are routed in the browser, after `#`). Its URLs
 * are relative, so it works mounted under a prefix; mounted at `/tusk`, a request for
 * `/tusk` (which Hono routes here, unlike `/tusk/`) is sent to `/tusk/index.html`.
 */
export function mountDashboard(app: Hono<AppEnv>): void {
  const assets = loadAssets();
  const send = (name: string) => {
    const asset = assets.get(name);
    if (!asset) return null;
    return new Response(new Uint8Array(asset[1]), {
      headers: {
        'content-type': asset[0],
        'cache-control': 'no-cache',
        'content-security-policy': CSP,
        'x-content-type-options': 'nosniff',
        'referrer-policy': 'no-referrer',
      },
    });
  };
  app.get('/', (c) =>
    c.req.path.endsWith('/') ? (send('index.html') as Response) : c.redirect(`${c.req.path}/index.html`),
  );
  app.get('/index.html', () => send('index.html') as Response);
  app.get('/assets/:file', (c) => send(c.req.param('file')) ?? c.notFound());
}
