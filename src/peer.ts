const loaded = new Map<string, Promise<unknown>>();

/**
 * Imports an optional peer dependency (kysely, drizzle-orm, bullmq, ioredis) the first
 * time a feature needs it, so users install only what they use. A failed import is
 * retried next time, and reported by `explain`.
 */
export function importPeer<T>(name: string, explain: (error: Error) => Error): Promise<T> {
  let loading = loaded.get(name);
  if (!loading) {
    loading = import(name).catch((error: unknown) => {
      loaded.delete(name);
      throw explain(error as Error);
    });
    loaded.set(name, loading);
  }
  return loading as Promise<T>;
}
