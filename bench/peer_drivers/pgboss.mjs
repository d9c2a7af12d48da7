// pg-boss's own rescue, driven for bench/peers.py: `install DSN` creates its schema and the
// queue; `rescue DSN` opens the instance, says ready, waits for "go" on stdin, then times one
// supervise() call (its expiry, then the rest of the pass) and prints the figures as JSON.
// The expiry's end is read off the instance's own statements ("expiryPicked" batches), each
// also timed in the client: one batch is one transaction (BEGIN, advisory lock, CTE, COMMIT).
import { PgBoss } from 'pg-boss'
import { createInterface } from 'node:readline'
import { once } from 'node:events'

const [mode, dsn] = process.argv.slice(2)
const boss = new PgBoss({ connectionString: dsn, supervise: false, schedule: false, migrate: mode === 'install' })
boss.on('error', (err) => { console.error(err); process.exitCode = 1 })
await boss.start()

if (mode === 'install') {
  await boss.createQueue('bench', { expireInSeconds: 900, retryLimit: 2, retryDelay: 0 })
  await boss.stop({ graceful: false, wait: true })
  console.log(JSON.stringify({ installed: true }))
  process.exit(0)
}

const db = boss.getDb()
const executeSql = db.executeSql.bind(db)
let expiryEnd = null
let expiryBatches = 0
let longestBatch = 0
db.executeSql = async (text, values) => {
  const started = performance.now()
  const result = await executeSql(text, values)
  if (text.includes('"expiryPicked"')) {
    expiryEnd = performance.now()
    expiryBatches += 1
    longestBatch = Math.max(longestBatch, (expiryEnd - started) / 1000)
  }
  return result
}
await executeSql('SELECT 1')  // the pool's connection open before the clock starts
console.log(JSON.stringify({ ready: true }))
const lines = createInterface({ input: process.stdin })
await once(lines, 'line')
const started = performance.now()
await boss.supervise('bench')
const finished = performance.now()
console.log(JSON.stringify({
  seconds: (expiryEnd - started) / 1000,
  call_seconds: (finished - started) / 1000,
  transactions: expiryBatches,
  longest_client_transaction: longestBatch,
}))
lines.close()
await boss.stop({ graceful: false, wait: true })
process.exit(process.exitCode ?? 0)
