import type { Peer, PeerContext, System } from './types.js';

export * from './types.js';

/**
 * The peer of `system`. Its module (and so its library) is loaded only now, so that a
 * worker process holds one system's code and its RSS is that system's.
 */
export async function openPeer(system: System, ctx: PeerContext): Promise<Peer> {
  switch (system) {
    case 'tusk':
      return (await import('./tusk.js')).tuskPeer(ctx);
    case 'graphile':
      return (await import('./graphile.js')).graphilePeer(ctx);
    case 'pgboss':
      return (await import('./pgboss.js')).pgbossPeer(ctx);
    case 'bullmq':
      return (await import('./bullmq.js')).bullmqPeer(ctx);
  }
}

export const redisUrl = () => process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
