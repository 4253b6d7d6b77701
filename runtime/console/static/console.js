// The console's script, written here with no library (the console works with no network but the
// server's): a background response's events followed, and the playground, whose turns go to
// /console/api/responses (the CSRF token in a header) and whose text is shown delta by delta.
"use strict";

// The JSON of each server-sent event of `response` as it comes, to `onEvent`.
async function readEvents(response, onEvent) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = frame.split("\n").filter((line) => line.startsWith("data:")).map((line) => line.slice(5).trim()).join("");
      if (data && data !== "[DONE]") onEvent(JSON.parse(data));
    }
  }
}

// A background response's events page: its events followed as they are logged, each with the
// time it reached the page.
(async function () {
  const table = document.getElementById("events");
  if (!table) return;
  const started = performance.now();
  const response = await fetch("/console/api/responses/" + encodeURIComponent(table.dataset.responseId) + "/events",
                               { credentials: "same-origin" });
  if (!response.ok || !response.body) { table.insertAdjacentText("afterend", "Error " + response.status); return; }
  let count = 0;
  await readEvents(response, (payload) => {
    const row = table.insertRow();
    for (const text of [String(payload.sequence_number ?? count), "+" + Math.round(performance.now() - started) + " ms",
                        payload.type, JSON.stringify(payload).slice(0, 300)]) {
      row.insertCell().textContent = text;
    }
    count += 1;
    if (payload.response && payload.response.status) document.getElementById("status").textContent = payload.response.status;
  });
})();

// The playground.
(function () {
  const form = document.getElementById("turn");
  if (!form) return;
  const conversation = document.getElementById("conversation");
  const stats = document.getElementById("stats");
  const code = document.getElementById("code");
  let previous = null;

  function settings() {
    const data = new FormData(form);
    const body = { model: data.get("model"), store: true };
    if (data.get("instructions")) body.instructions = data.get("instructions");
    if (data.get("temperature")) body.temperature = Number(data.get("temperature"));
    if (data.get("max_output_tokens")) body.max_output_tokens = Number(data.get("max_output_tokens"));
    if (data.get("effort")) body.reasoning = { effort: data.get("effort"), summary: "auto" };
    const tools = (data.get("tools") || "").trim();
    if (tools) body.tools = JSON.parse(tools);  // a mistake is shown by the caller
    if (form.dataset.conversation) body.conversation = form.dataset.conversation;  // the conversation keeps the turns
    else if (previous) body.previous_response_id = previous;
    return body;
  }

  function request() {
    const body = settings();
    body.input = new FormData(form).get("input");
    return body;
  }

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function bubble(kind, text) {
    const div = element("div", "turn " + kind, text);
    conversation.appendChild(div);
    return div;
  }

  // The items of a finished turn other than its text: tool calls and their results, approvals
  // asked (as buttons), a function call waiting for its result (a box to type it in), reasoning.
  function showItems(done, answer) {
    for (const item of done.output || []) {
      if (item.type === "message") {
        for (const part of item.content || []) {
          for (const note of part.annotations || []) {
            if (note.type === "url_citation" && /^https?:/.test(note.url)) {
              const link = element("a", "citation", note.title || note.url);
              link.href = note.url; link.rel = "noreferrer"; link.target = "_blank";
              answer.appendChild(element("br")); answer.appendChild(link);
            }
          }
        }
      } else if (item.type === "mcp_approval_request") {
        const box = bubble("approval", item.server_label + "." + item.name + " " + item.arguments + " ");
        for (const [label, approve] of [["Approve", true], ["Deny", false]]) {
          const button = element("button", "approve", label);
          button.type = "button";
          button.addEventListener("click", () => {
            box.querySelectorAll("button").forEach((b) => { b.disabled = true; });
            turn([{ type: "mcp_approval_response", approval_request_id: item.id, approve: approve }], label);
          });
          box.appendChild(button);
        }
      } else if (item.type === "function_call") {
        const box = bubble("call", item.name + "(" + item.arguments + ")");
        const result = element("textarea", "result"); result.rows = 2; result.placeholder = "The function's result";
        const button = element("button", "send-result", "Send result"); button.type = "button";
        button.addEventListener("click", () => {
          button.disabled = true;
          turn([{ type: "function_call_output", call_id: item.call_id, output: result.value }], "result: " + result.value);
        });
        box.appendChild(result); box.appendChild(button);
      } else if (item.type === "mcp_call" || item.type === "web_search_call" || item.type === "file_search_call") {
        bubble("tool", item.type + " " + (item.name || "") + " " + (item.arguments || "") + (item.output ? " → " + item.output : "") +
          (item.error ? " ✗ " + item.error : ""));
      } else if (item.type === "reasoning") {
        const text = (item.summary || []).map((part) => part.text).join("\n");
        if (text) bubble("reasoning", text);
      }
    }
  }

  async function turn(input, shown) {
    let body;
    try { body = settings(); } catch (error) { stats.textContent = "The tools are not valid JSON: " + error.message; return; }
    body.input = input;
    bubble("user", shown);
    const answer = bubble("assistant", "");
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
    await readEvents(response, (payload) => {
      if (payload.type === "response.output_text.delta") {
        if (first === null) first = performance.now();
        answer.textContent += payload.delta;
      } else if (payload.type === "response.completed" || payload.type === "response.failed" || payload.type === "response.incomplete") {
        finished(payload.response, answer, started, first);
      } else if (payload.type === "error") {
        answer.classList.add("error");
        answer.textContent += "\n" + ((payload.error || payload).message || "error");
      }
    });
  }

  function finished(done, answer, started, first) {
    previous = done.id;
    answer.dataset.responseId = done.id;
    const usage = done.usage || {};
    stats.textContent = done.status + " · " + Math.round(performance.now() - started) + " ms" +
      (first !== null ? " · first token " + Math.round(first - started) + " ms" : "") +
      " · tokens in " + (usage.input_tokens || 0) + ", out " + (usage.output_tokens || 0) + " · ";
    const link = element("a", "", done.id);
    link.href = "/console/responses/" + encodeURIComponent(done.id);
    stats.appendChild(link);
    if (done.error) { answer.classList.add("error"); answer.textContent += "\n" + done.error.message; }
    if (!answer.textContent) answer.remove();
    showItems(done, answer);
  }

  // An attached image or file goes with the message as a data URL (input_image, input_file).
  function attachment() {
    const picker = form.querySelector("#attachment");
    const file = picker && picker.files && picker.files[0];
    if (!file) return Promise.resolve(null);
    return new Promise((resolve, reject) => {
      const reader = new FileReader();
      reader.onload = () => {
        picker.value = "";
        resolve(file.type.startsWith("image/") ? { type: "input_image", image_url: reader.result }
          : { type: "input_file", filename: file.name, file_data: reader.result });
      };
      reader.onerror = () => reject(reader.error);
      reader.readAsDataURL(file);
    });
  }

  async function send(event) {
    event.preventDefault();
    const input = form.querySelector("#input");
    const text = input.value;
    input.value = "";
    const part = await attachment();
    if (!part) { turn(text, text); return; }
    const shown = text + " [" + (part.type === "input_image" ? "image" : part.filename) + "]";
    turn([{ role: "user", content: [{ type: "input_text", text: text }, part] }], shown);
  }

  function showCode() {
    let body;
    try { body = request(); } catch (error) { stats.textContent = "The tools are not valid JSON: " + error.message; return; }
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
