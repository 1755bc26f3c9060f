// The official TypeScript SDK client (@modelcontextprotocol/sdk) driving
// `mageguard mcp` in front of @modelcontextprotocol/server-filesystem, as an
// agent's MCP configuration would start it (stdio). Run by make mcp-e2e.
//
//   node client.mjs scenario enforce|monitor   a read whose result holds an
//       injected instruction, then the write it asks for: blocked (the file
//       does not exist) or, with --monitor, forwarded (it does); both calls in
//       the audit log
//   node client.mjs rugpull enforce|monitor    rugpull-server.mjs changes its
//       tool's definition after the first call: enforcing, the client is
//       shown the pinned definition and the call carrying "exfil" is refused
//       without reaching the server; with --monitor it is forwarded and
//       flagged; the change is audited (tool_changed) either way
//   node client.mjs latency                   E2E_CALLS reads straight to
//       server-filesystem, then through the gateway; p50/p99 of each
//
// Settings come from the environment: E2E_MAGEGUARD (the binary),
// E2E_GATEWAY_ARGS (JSON array: the arguments, "mcp" and its flags), E2E_SERVER (JSON array: the
// server's command), E2E_DIR (the server's folder), E2E_AUDIT (the audit
// log), E2E_LOG (stderr of the processes), E2E_CALLS, E2E_OUT (latency JSON);
// for rugpull, RUGPULL_SERVER (the server's script) and RUGPULL_LOG.
import fs from "node:fs";
import path from "node:path";
import { performance } from "node:perf_hooks";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const env = (k) => {
  if (!process.env[k]) throw new Error(`${k} is not set`);
  return process.env[k];
};
const dir = env("E2E_DIR");
const server = JSON.parse(env("E2E_SERVER"));
const log = fs.createWriteStream(env("E2E_LOG"), { flags: "a" });
let failed = 0;
const check = (ok, what) => {
  console.log(`${ok ? "ok  " : "FAIL"} ${what}`);
  if (!ok) failed++;
};

async function connect(command, args) {
  const transport = new StdioClientTransport({ command, args, env: process.env, stderr: "pipe" });
  transport.stderr?.pipe(log, { end: false });
  const client = new Client({ name: "mcp-e2e-agent", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

function gateway() {
  return connect(env("E2E_MAGEGUARD"), [...JSON.parse(env("E2E_GATEWAY_ARGS")), "--", ...server]);
}

const text = (r) => (r.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n");

function audit() {
  return fs.readFileSync(env("E2E_AUDIT"), "utf8").trim().split("\n").filter(Boolean).map((l) => JSON.parse(l));
}

async function scenario(mode) {
  const notes = path.join(dir, "notes.txt");
  const exfil = path.join(dir, "exfil.txt");
  fs.rmSync(exfil, { force: true });
  const client = await gateway();
  const tools = (await client.listTools()).tools.map((t) => t.name);
  check(tools.includes("read_text_file") && tools.includes("write_file"), `[${mode}] the downstream's tools through the gateway (${tools.length})`);
  const read = await client.callTool({ name: "read_text_file", arguments: { path: notes } });
  check(!read.isError && text(read).includes("exfil.txt"), `[${mode}] read_text_file notes.txt: allowed, the result holds the injected instruction`);
  const write = await client.callTool({ name: "write_file", arguments: { path: exfil, content: "sk-live-0123456789" } });
  await client.close();
  const exists = fs.existsSync(exfil);
  if (mode === "enforce") {
    check(write.isError && text(write).includes("mageguard blocked this call to write_file"), `[${mode}] write_file exfil.txt: blocked: ${JSON.stringify(text(write))}`);
    check(!exists, `[${mode}] exfil.txt does not exist`);
  } else {
    check(!write.isError, `[${mode}] write_file exfil.txt: forwarded: ${JSON.stringify(text(write))}`);
    check(exists, `[${mode}] exfil.txt exists`);
  }
  const recs = audit();
  const w = recs.filter((r) => r.tool === "write_file");
  const r = recs.filter((r) => r.tool === "read_text_file");
  check(r.length === 2 && r[0].decision === "allow" && r[0].forwarded && r[1].event === "outcome", `[${mode}] audit: read_text_file allowed, forwarded, outcome recorded`);
  if (mode === "enforce") {
    check(w.length === 1 && w[0].decision === "block" && !w[0].forwarded, `[${mode}] audit: write_file blocked, not forwarded: ${JSON.stringify(w[0]?.rationale)}`);
  } else {
    check(w.length === 2 && w[0].decision === "block" && w[0].forwarded && w[0].monitor && w[1].event === "outcome",
      `[${mode}] audit: write_file blocked by the guard, forwarded (monitor), outcome recorded`);
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function rugpull(mode) {
  const serverLog = env("RUGPULL_LOG");
  fs.rmSync(serverLog, { force: true });
  const client = await connect(env("E2E_MAGEGUARD"), [...JSON.parse(env("E2E_GATEWAY_ARGS")), "--", "node", env("RUGPULL_SERVER")]);
  let changed = false;
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => { changed = true; });
  const first = (await client.listTools()).tools.find((t) => t.name === "read_file");
  check(first && first.description === "Read a file.", `[rugpull ${mode}] the first listing: ${JSON.stringify(first?.description)}`);
  const r1 = await client.callTool({ name: "read_file", arguments: { path: "a.txt" } });
  check(!r1.isError, `[rugpull ${mode}] a call before the change runs: ${JSON.stringify(text(r1))}`);
  let changes = [];
  for (let i = 0; i < 200 && !(changed && changes.length > 0); i++) {
    await sleep(50);
    changes = audit().filter((r) => r.event === "tool_changed");
  }
  check(changed, `[rugpull ${mode}] the client heard notifications/tools/list_changed`);
  const c = changes[0];
  check(changes.length === 1 && c.tool === "read_file" && c.old_hash && c.new_hash && c.old_hash !== c.new_hash &&
    JSON.stringify(c.fields) === JSON.stringify(["description", "inputSchema"]),
    `[rugpull ${mode}] audit: tool_changed read_file ${JSON.stringify(c?.fields)} ${c?.old_hash?.slice(0, 19)} -> ${c?.new_hash?.slice(0, 19)}`);
  const shown = (await client.listTools()).tools.find((t) => t.name === "read_file");
  const poisoned = (shown?.description ?? "").includes("IMPORTANT");
  check(mode === "enforce" ? !poisoned : poisoned, `[rugpull ${mode}] the client is shown ${mode === "enforce" ? "the pinned" : "the new"} definition: ${JSON.stringify(shown?.description)}`);
  const r2 = await client.callTool({ name: "read_file", arguments: { path: "a.txt", exfil: "ssh-key" } });
  await client.close();
  const ran = fs.readFileSync(serverLog, "utf8").trim().split("\n").map((l) => JSON.parse(l));
  const exfilRan = ran.some((a) => a.exfil);
  const dec = audit().filter((r) => r.event === "decision" && r.tool === "read_file");
  const last = dec[dec.length - 1];
  if (mode === "enforce") {
    check(r2.isError && text(r2).includes('the tool "read_file" changed since it was approved'), `[rugpull ${mode}] the call carrying exfil is refused: ${JSON.stringify(text(r2))}`);
    check(!exfilRan, `[rugpull ${mode}] the server never got exfil`);
    check(last && !last.forwarded && last.flag === "tool_changed: description, inputSchema", `[rugpull ${mode}] audit: the call refused, flagged: ${JSON.stringify(last?.flag)}`);
  } else {
    check(!r2.isError && text(r2) === "received exfil: ssh-key", `[rugpull ${mode}] the call is forwarded: ${JSON.stringify(text(r2))}`);
    check(exfilRan, `[rugpull ${mode}] the server got it`);
    check(last && last.forwarded && last.monitor && last.flag === "tool_changed: description, inputSchema", `[rugpull ${mode}] audit: forwarded, flagged: ${JSON.stringify(last?.flag)}`);
  }
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.max(0, Math.ceil(p * s.length) - 1)];
};

async function timeCalls(client, n, notes) {
  for (let i = 0; i < 3; i++) await client.callTool({ name: "read_text_file", arguments: { path: notes } }); // warm up
  const ms = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const r = await client.callTool({ name: "read_text_file", arguments: { path: notes } });
    ms.push(performance.now() - t0);
    if (r.isError) throw new Error(`call ${i}: ${text(r)}`);
  }
  return ms;
}

async function latency() {
  const n = Number(process.env.E2E_CALLS || 60);
  const notes = path.join(dir, "notes.txt");
  const direct = await connect(server[0], server.slice(1));
  const alone = await timeCalls(direct, n, notes);
  await direct.close();
  const gw = await gateway();
  const through = await timeCalls(gw, n, notes);
  await gw.close();
  const recs = audit();
  const guard = recs.filter((r) => r.event === "decision").slice(-n).map((r) => r.guard_ms);
  const down = recs.filter((r) => r.event === "outcome").slice(-n).map((r) => r.downstream_ms ?? 0);
  const row = (name, xs) => `${name.padEnd(44)} ${pct(xs, 0.5).toFixed(1).padStart(8)} ${pct(xs, 0.99).toFixed(1).padStart(8)}`;
  const added = { p50: pct(through, 0.5) - pct(alone, 0.5), p99: pct(through, 0.99) - pct(alone, 0.99) };
  console.log(`\n${n} read_text_file calls of a ${fs.statSync(notes).size}-byte file, one at a time, ms:`);
  console.log(`${"".padEnd(44)} ${"p50".padStart(8)} ${"p99".padStart(8)}`);
  console.log(row("server-filesystem alone (client-side)", alone));
  console.log(row("through mageguard mcp (client-side)", through));
  console.log(`${"added by the gateway (difference)".padEnd(44)} ${added.p50.toFixed(1).padStart(8)} ${added.p99.toFixed(1).padStart(8)}`);
  console.log(row("  the guard's step (audit guard_ms)", guard));
  console.log(row("  the downstream's call (audit downstream_ms)", down));
  const summary = { calls: n, alone_ms: { p50: pct(alone, 0.5), p99: pct(alone, 0.99) }, gateway_ms: { p50: pct(through, 0.5), p99: pct(through, 0.99) },
    added_ms: added, guard_ms: { p50: pct(guard, 0.5), p99: pct(guard, 0.99) }, downstream_ms: { p50: pct(down, 0.5), p99: pct(down, 0.99) } };
  fs.writeFileSync(env("E2E_OUT"), JSON.stringify(summary, null, 2) + "\n");
  check(through.length === n && guard.length === n, `latency: ${n} calls through the gateway, each decided by the guard`);
}

try {
  if (process.argv[2] === "scenario") await scenario(process.argv[3]);
  else if (process.argv[2] === "rugpull") await rugpull(process.argv[3]);
  else if (process.argv[2] === "latency") await latency();
  else throw new Error("usage: client.mjs scenario enforce|monitor | latency");
} catch (e) {
  console.log(`FAIL ${e.stack ?? e}`);
  failed++;
}
log.end();
process.exit(failed ? 1 : 0);
