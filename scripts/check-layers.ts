// npm run lint: the layers of src/ point one way (docs/ARCHITECTURE.md). A file may import
// its own layer or a lower one; an import of a higher layer fails the check, naming it.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const SRC = resolve(import.meta.dirname, '../src');

/** Lowest first. A top-level file is its own name, a folder its first path segment. */
const LAYERS: string[][] = [
  ['errors', 'types', 'version', 'log', 'peer'], // foundations: no behaviour of their own
  ['db'], // connections, embedded server, listener
  ['queries', 'migrate'], // every SQL statement; the schema's versions
  ['validation'], // checks of every input, with the messages that name the field
  ['client', 'policies', 'tasks', 'schedules', 'upkeep', 'worker', 'drain', 'metrics'], // the parts
  ['tusk'], // the facade
  ['http', 'cli', 'demo', 'index'], // what users run, and the package's entry, which exports them
];

/** Known crossings, each with its reason: a type describing a lower layer's input. */
const ALLOWED = new Set([
  'queries/copyJobs.ts -> client/entries.ts', // type only: the records the insert writes
  'queries/insertJobs.ts -> client/entries.ts', // type only: the records the insert writes
  'types.ts -> db/adapters.ts', // type only: the transaction a caller passes
]);

const layerOf = (file: string): number => {
  const top = file.split('/')[0]?.replace(/\.ts$/, '') ?? '';
  const i = LAYERS.findIndex((names) => names.includes(top));
  if (i < 0) throw new Error(`check-layers: ${file} belongs to no layer; add its folder to LAYERS`);
  return i;
};

const files = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(join(dir, e.name)) : e.name.endsWith('.ts') ? [join(dir, e.name)] : [],
  );

const bad: string[] = [];
for (const path of files(SRC)) {
  const from = relative(SRC, path);
  // static imports and re-exports, side-effect imports and dynamic import()s alike
  const specs = /(?:(?:import|export)[^'";]*?from\s+|\bimport\s*\(\s*|\bimport\s+)'(\.[^']+)'/g;
  for (const [, spec] of readFileSync(path, 'utf8').matchAll(specs)) {
    const to = relative(SRC, resolve(dirname(path), spec as string)).replace(/\.js$/, '.ts');
    if (layerOf(to) > layerOf(from) && !ALLOWED.has(`${from} -> ${to}`)) {
      bad.push(`  ${from} imports ${to}: ${LAYERS[layerOf(from)]?.join('/')} may not import ${LAYERS[layerOf(to)]?.join('/')}`);
    }
  }
}
if (bad.length > 0) {
  console.error(`check-layers: ${bad.length} import(s) against the layers (see docs/ARCHITECTURE.md):\n${bad.join('\n')}`);
  process.exit(1);
}
console.log(`check-layers: ${files(SRC).length} files, every import points down or sideways`);
