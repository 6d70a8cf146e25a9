import pg from 'pg';
import { migrate } from '/work/main/src/migrate/migrate.js';
const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:5432/test' });
await pool.query(`DROP SCHEMA IF EXISTS ${process.argv[2]} CASCADE`);
console.log(await migrate(pool, process.argv[2]));
await pool.end();
