// Compares two runs of the conformance suite (their printed summaries):
// every scenario that passes against the server alone must pass through the
// gateway, and dns-rebinding-protection must pass in full through it.
//
//   node compare.mjs ALONE.txt GATEWAY.txt
import fs from "node:fs";

function summary(file) {
  const out = new Map();
  const text = fs.readFileSync(file, "utf8");
  for (const m of text.matchAll(/^[✓✗] ([\w-]+): (\d+) passed, (\d+) failed$/gm)) {
    out.set(m[1], { passed: Number(m[2]), failed: Number(m[3]) });
  }
  if (out.size === 0) throw new Error(`${file}: no summary`);
  return out;
}

const [alone, gateway] = process.argv.slice(2).map(summary);
const cell = (r) => (r ? `${r.failed === 0 ? "pass" : "FAIL"} ${r.passed}/${r.passed + r.failed}` : "missing");
let bad = 0;
console.log(`${"scenario".padEnd(32)} ${"alone".padEnd(10)} ${"through the gateway".padEnd(10)}`);
for (const [name, a] of alone) {
  const g = gateway.get(name);
  const must = (a.failed === 0 && a.passed > 0) || name === "dns-rebinding-protection";
  const ok = !must || (g && g.failed === 0 && g.passed > 0);
  if (!ok) bad++;
  console.log(`${name.padEnd(32)} ${cell(a).padEnd(10)} ${cell(g).padEnd(10)}${ok ? "" : "   <- must pass"}`);
}
const count = (m) => [...m.values()].filter((r) => r.failed === 0 && r.passed > 0).length;
console.log(`scenarios passing: ${count(alone)} alone, ${count(gateway)} through the gateway; ${bad ? `${bad} regressed` : "none regressed"}`);
process.exit(bad ? 1 : 0);
