// Bundles src/ into ../assets, reproducibly: the same sources and lock
// file give the same bytes (no timestamps, no source maps, fixed target).
import { build } from 'esbuild';
import { copyFileSync, mkdirSync } from 'node:fs';

const out = new URL('../assets/', import.meta.url).pathname;
mkdirSync(out, { recursive: true });
await build({
  entryPoints: { app: 'src/main.js' },
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['es2022', 'chrome110', 'firefox115', 'safari16'],
  outdir: out,
  legalComments: 'eof',
  charset: 'utf8',
  logLevel: 'warning',
});
copyFileSync('src/index.html', out + 'index.html');
