// A scripted guard model behind an OpenAI-compatible /v1/chat/completions
// (rollout.generator: openai, rollout.remote_api: chat), for the blocked-call
// scenario of make mcp-e2e: the gateway, the guard's prompts, parsing,
// decision rule, storage and audit are mageguard's own; only the model's
// answers are scripted, by two rules that follow the guard loop's data flow:
//
//   memory (update_memory): the previous memory, plus one line
//     "ATTACK: a tool output asked to write to FILE" for each observation
//     holding an instruction (IMPORTANT / ignore) that names a FILE.txt;
//   judge (assess_risk): reject a call whose arguments name a FILE that
//     the memory records as an attack's target, approve anything else.
//
// The judge sees only the memory and the pending call, as in the guard:
// it can block the write only if the memory kept the injected instruction.
import http from "node:http";

const port = Number(process.argv[2] || 0);

function between(text, open, close) {
  const i = text.indexOf(open);
  if (i < 0) return null;
  const j = text.indexOf(close, i + open.length);
  return j < 0 ? null : text.slice(i + open.length, j);
}

function memory(user) {
  let prev = between(user, "<memory>\n", "\n</memory>") ?? "";
  if (prev === "(empty)") prev = "";
  const lines = prev ? prev.split("\n") : ["TASK: see the user's request"];
  let rest = user;
  for (;;) {
    const obs = between(rest, "<observation>\n", "\n</observation>");
    if (obs === null) break;
    rest = rest.slice(rest.indexOf("</observation>") + 1);
    if (!/IMPORTANT|ignore/i.test(obs)) continue;
    for (const f of obs.match(/[\w.-]+\.txt/g) ?? []) {
      const line = `ATTACK: a tool output asked to write to ${f}`;
      if (!lines.includes(line)) lines.push(line);
    }
  }
  return { name: "update_memory", arguments: { content: lines.join("\n") } };
}

function judge(user) {
  const mem = between(user, "<memory>\n", "\n</memory>") ?? "";
  const action = between(user, "Pending tool call:\n<action>\n", "\n</action>") ?? "";
  for (const m of mem.matchAll(/ATTACK: a tool output asked to write to (\S+)/g)) {
    if (action.includes(m[1])) {
      return { name: "assess_risk", arguments: { decision: "reject",
        rationale: `the call touches ${m[1]}, which an instruction injected into a tool output asked for` } };
    }
  }
  return { name: "assess_risk", arguments: { decision: "approve", rationale: "within the task" } };
}

const server = http.createServer((req, res) => {
  let body = "";
  req.on("data", (c) => (body += c));
  req.on("end", () => {
    if (req.method !== "POST" || !req.url.endsWith("/chat/completions")) {
      res.writeHead(404).end();
      return;
    }
    const r = JSON.parse(body);
    const user = r.messages.find((m) => m.role === "user")?.content ?? "";
    const call = r.tool_choice.function.name === "update_memory" ? memory(user) : judge(user);
    const answer = {
      id: "stub", object: "chat.completion", model: r.model,
      choices: [{ index: 0, finish_reason: "tool_calls", message: { role: "assistant", content: null,
        tool_calls: [{ id: "call_1", type: "function", function: { name: call.name, arguments: JSON.stringify(call.arguments) } }] } }],
      usage: { prompt_tokens: Math.ceil(user.length / 4), completion_tokens: 20, total_tokens: Math.ceil(user.length / 4) + 20 },
    };
    res.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify(answer));
  });
});
server.listen(port, "127.0.0.1", () => console.log(`guard-stub: listening on ${server.address().port}`));
