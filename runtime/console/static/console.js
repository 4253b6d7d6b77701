// The playground: each turn is sent to /console/api/responses (the CSRF token in a header) and its
// server-sent events read as they come, the text shown delta by delta. Written here, with no
// library: the console works with no network but the server's.
"use strict";
(function () {
  const form = document.getElementById("turn");
  if (!form) return;
  const conversation = document.getElementById("conversation");
  const stats = document.getElementById("stats");
  const code = document.getElementById("code");
  let previous = null;

  function request() {
    const data = new FormData(form);
    const body = { model: data.get("model"), input: data.get("input"), store: true };
    if (data.get("instructions")) body.instructions = data.get("instructions");
    if (data.get("temperature")) body.temperature = Number(data.get("temperature"));
    if (data.get("max_output_tokens")) body.max_output_tokens = Number(data.get("max_output_tokens"));
    if (data.get("effort")) body.reasoning = { effort: data.get("effort") };
    if (previous) body.previous_response_id = previous;
    return body;
  }

  function bubble(kind, text) {
    const div = document.createElement("div");
    div.className = "turn " + kind;
    div.textContent = text;
    conversation.appendChild(div);
    return div;
  }

  async function send(event) {
    event.preventDefault();
    const body = request();
    bubble("user", body.input);
    const answer = bubble("assistant", "");
    answer.id = "answer-" + conversation.children.length;
    form.querySelector("#input").value = "";
    const started = performance.now();
    let first = null;
    const response = await fetch("/console/api/responses", {
      method: "POST", headers: { "content-type": "application/json", "x-csrf-token": form.dataset.csrf },
      body: JSON.stringify(body), credentials: "same-origin",
    });
    if (!response.ok || !response.body) {
      answer.classList.add("error");
      answer.textContent = "Error " + response.status + ": " + (await response.text());
      return;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = frame.split("\n").filter((line) => line.startsWith("data:")).map((line) => line.slice(5).trim()).join("");
        if (!data || data === "[DONE]") continue;
        const payload = JSON.parse(data);
        if (payload.type === "response.output_text.delta") {
          if (first === null) first = performance.now();
          answer.textContent += payload.delta;
        } else if (payload.type === "response.completed" || payload.type === "response.failed" || payload.type === "response.incomplete") {
          const done = payload.response;
          previous = done.id;
          answer.dataset.responseId = done.id;
          const usage = done.usage || {};
          stats.textContent = done.status + " · " + Math.round(performance.now() - started) + " ms" +
            (first !== null ? " · first token " + Math.round(first - started) + " ms" : "") +
            " · tokens in " + (usage.input_tokens || 0) + ", out " + (usage.output_tokens || 0) + " · ";
          const link = document.createElement("a");
          link.href = "/console/responses/" + encodeURIComponent(done.id);
          link.textContent = done.id;
          stats.appendChild(link);
          if (done.error) { answer.classList.add("error"); answer.textContent += "\n" + done.error.message; }
        } else if (payload.type === "error") {
          answer.classList.add("error");
          answer.textContent += "\n" + ((payload.error || payload).message || "error");
        }
      }
    }
  }

  function showCode() {
    const body = request();
    body.stream = true;
    const json = JSON.stringify(body, null, 2);
    const args = Object.entries(body).map(([key, value]) => "    " + key + "=" + JSON.stringify(value).replace(/\btrue\b/g, "True")
      .replace(/\bfalse\b/g, "False").replace(/\bnull\b/g, "None") + ",").join("\n");
    code.textContent = "from openai import OpenAI\n\nclient = OpenAI(base_url=\"" + location.origin + "/v1\", api_key=\"...\")\n" +
      "for event in client.responses.create(\n" + args + "\n):\n    print(event)\n\n" +
      "curl " + location.origin + "/v1/responses -H 'content-type: application/json' -H 'authorization: Bearer ...' \\\n  -d '" +
      json.replace(/'/g, "'\\''") + "'";
    code.hidden = false;
  }

  form.addEventListener("submit", send);
  document.getElementById("reset").addEventListener("click", () => { previous = null; conversation.textContent = ""; stats.textContent = ""; });
  document.getElementById("show-code").addEventListener("click", showCode);
})();
