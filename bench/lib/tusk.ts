// Tusk as it ships: the compiled dist/ build (npm run bench builds it first), typed by the
// sources. Loading src/ through tsx would measure tsx's transform (it wraps every closure
// a job creates) rather than Tusk.
import type * as TuskModule from '../../src/index.js';

const dist = '../../dist/index.js';
const module = (await import(dist)) as typeof TuskModule;
export const Tusk = module.Tusk;
export const bullmqSink = module.bullmqSink;
export type Tusk = TuskModule.Tusk;
export type { WorkerOptions } from '../../src/index.js';
