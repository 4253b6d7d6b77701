// The console's script, written here with no library (the console works with no network but the
// server's): a background response's events followed, and the playground, whose turns go to
// /console/api/responses (the CSRF token in a header) and whose text is shown delta by delta, and
// whose tools are built by forms (templates/playground_tools.html).
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

// The playground's tool forms: the request's `tools` are those the forms build, in the order shown
// (functions, MCP servers, file_search, web_search), then those of the JSON box. A mistake throws
// an Error saying which tool and why; the caller shows it and sends nothing.
const playgroundTools = {
  build(form) {
    const tools = [];
    form.querySelectorAll("#functions .function-tool").forEach((box, index) => tools.push(this.functionTool(box, index + 1)));
    form.querySelectorAll("#mcps .mcp-tool").forEach((box, index) => tools.push(this.mcpTool(box, index + 1)));
    for (const tool of [this.fileSearch(form), this.webSearch(form), this.codeInterpreter(form)]) if (tool) tools.push(tool);
    return tools.concat(this.raw(form));
  },

  // What is wrong with a function's parameters (a JSON Schema: a JSON object), or null.
  parametersError(text) {
    if (!text.trim()) return null;  // empty: a function of no parameters
    let value;
    try { value = JSON.parse(text); } catch (error) { return "not valid JSON (" + error.message + ")"; }
    if (value === null || typeof value !== "object" || Array.isArray(value)) {
      return "not a JSON object (a JSON Schema such as {\"type\": \"object\", \"properties\": {}})";
    }
    return null;
  },

  functionTool(box, number) {
    const name = box.querySelector(".tool-name").value.trim();
    if (!name) throw new Error("function " + number + " has no name.");
    const text = box.querySelector(".tool-parameters").value;
    const error = this.parametersError(text);
    if (error) throw new Error("function " + name + ": its parameters are " + error + ".");
    const tool = { type: "function", name: name };
    const description = box.querySelector(".tool-description").value.trim();
    if (description) tool.description = description;
    tool.parameters = text.trim() ? JSON.parse(text) : { type: "object", properties: {} };
    tool.strict = box.querySelector(".tool-strict").checked;
    return tool;
  },

  mcpTool(box, number) {
    const field = (selector) => box.querySelector(selector).value.trim();
    const label = field(".mcp-label"), url = field(".mcp-url"), connector = field(".mcp-connector");
    if (!label) throw new Error("MCP server " + number + " has no server label.");
    if (url && connector) throw new Error("MCP server " + label + ": give a server URL or a connector, not both.");
    const tool = { type: "mcp", server_label: label };
    if (url) tool.server_url = url;
    else if (connector) tool.connector_id = connector;
    tool.require_approval = box.querySelector(".mcp-approval").value;
    const allowed = field(".mcp-allowed").split(",").map((name) => name.trim()).filter(Boolean);
    if (allowed.length) tool.allowed_tools = allowed;
    const token = field(".mcp-authorization");  // only ever in this request: never stored, never in View code
    if (token) tool.authorization = token;
    return tool;
  },

  fileSearch(form) {
    const select = form.querySelector("#file-search-stores");
    const ids = select ? Array.from(select.selectedOptions, (option) => option.value) : [];
    if (!ids.length) return null;
    const tool = { type: "file_search", vector_store_ids: ids };
    const max = form.querySelector("#file-search-max").value.trim();
    if (max) {
      const count = Number(max);
      if (!Number.isInteger(count) || count < 1 || count > 50) throw new Error("file_search: max results is a whole number from 1 to 50.");
      tool.max_num_results = count;
    }
    return tool;
  },

  webSearch(form) {
    const on = form.querySelector("#web-search-on");
    if (!on || !on.checked) return null;
    const size = form.querySelector("#web-search-size").value;
    return size ? { type: "web_search", search_context_size: size } : { type: "web_search" };
  },

  codeInterpreter(form) {
    const on = form.querySelector("#code-interpreter-on");
    if (!on || !on.checked) return null;
    const memory = form.querySelector("#code-interpreter-memory").value;
    return { type: "code_interpreter", container: memory ? { type: "auto", memory_limit: memory } : { type: "auto" } };
  },

  // The JSON box: an array of tools (one tool object alone is taken as one tool).
  raw(form) {
    const text = form.querySelector("#tools").value.trim();
    if (!text) return [];
    let value;
    try { value = JSON.parse(text); } catch (error) { throw new Error("the JSON box is not valid JSON: " + error.message); }
    if (value !== null && typeof value === "object" && !Array.isArray(value)) return [value];
    if (!Array.isArray(value)) throw new Error("the JSON box holds a JSON array of tools ([{\"type\": ...}, ...]).");
    return value;
  },

  // Add and Remove buttons, and each function's parameters checked as they are typed.
  wire(form) {
    form.addEventListener("click", (event) => {
      const button = event.target.closest("button");
      if (button && button.classList.contains("add-tool")) {
        const box = document.getElementById(button.dataset.template).content.firstElementChild.cloneNode(true);
        document.getElementById(button.dataset.list).appendChild(box);
        box.querySelector("input").focus();
      } else if (button && button.classList.contains("remove-tool")) {
        button.closest("fieldset").remove();
      }
    });
    form.addEventListener("input", (event) => {
      if (!event.target.classList.contains("tool-parameters")) return;
      const error = this.parametersError(event.target.value);
      event.target.closest("fieldset").querySelector(".tool-error").textContent = error ? "The parameters are " + error + "." : "";
    });
  },
};

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
    const tools = playgroundTools.build(form);  // a mistake throws: the caller shows it
    if (tools.length) body.tools = tools;
    if (tools.some((tool) => tool.type === "code_interpreter")) body.include = ["code_interpreter_call.outputs"];  // its logs and images
    if (form.dataset.conversation) body.conversation = form.dataset.conversation;  // the conversation keeps the turns
    else if (previous) body.previous_response_id = previous;
    return body;
  }

  function request() {
    const body = settings();
    body.input = new FormData(form).get("input");
    return body;
  }

  // Whether the settings and tools make a request; if not, why, in the stats line (tools panel opened).
  function valid() {
    try {
      settings();
      if (stats.textContent.startsWith("Tools: ")) stats.textContent = "";  // an earlier mistake, now put right
      return true;
    } catch (error) {
      stats.textContent = "Tools: " + error.message;
      form.querySelector("#tools-panel").open = true;
      return false;
    }
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

  // A citation as a link: a cited file to its console page, a file code wrote to its download, a cited web page (http or https only:
  // never a javascript: URL) in a new tab, without a referrer. Anything else is no link.
  function citation(note) {
    if (note.type === "file_citation" && note.file_id) {
      const link = element("a", "citation", note.filename || note.file_id);
      link.href = "/console/files/" + encodeURIComponent(note.file_id);
      return link;
    }
    if (note.type === "container_file_citation" && note.file_id && note.container_id) {  // a file the code wrote: its download
      const link = element("a", "citation", note.filename || note.file_id);
      link.href = "/console/containers/" + encodeURIComponent(note.container_id) + "/files/" + encodeURIComponent(note.file_id) + "/content";
      return link;
    }
    if (note.type === "url_citation" && /^https?:\/\//i.test(note.url || "")) {
      const link = element("a", "citation", note.title || note.url);
      link.href = note.url; link.rel = "noreferrer"; link.target = "_blank";
      return link;
    }
    return null;
  }

  // The items of a finished turn other than its text: tool calls and their results, approvals
  // asked (as buttons), a function call waiting for its result (a box to type it in), reasoning.
  function showItems(done, answer) {
    for (const item of done.output || []) {
      if (item.type === "message") {
        const shown = new Set();  // each cited file or page once, however often cited
        for (const part of item.content || []) {
          for (const note of part.annotations || []) {
            const link = citation(note);
            if (link && !shown.has(link.href)) { shown.add(link.href); answer.appendChild(element("br")); answer.appendChild(link); }
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
      } else if (item.type === "code_interpreter_call") {
        const box = bubble("tool", "python: " + (item.code || ""));
        for (const output of item.outputs || []) {
          if (output.type === "logs") box.appendChild(element("pre", "logs", output.logs));
          else if (output.type === "image" && /^data:image\/png;base64,/.test(output.url || "")) {  // the sandbox's PNG, nothing else
            const image = element("img", "plot"); image.src = output.url; image.alt = "a figure the code drew"; box.appendChild(image);
          }
        }
      } else if (item.type === "reasoning") {
        const text = (item.summary || []).map((part) => part.text).join("\n");
        if (text) bubble("reasoning", text);
      }
    }
  }

  async function turn(input, shown) {
    if (!valid()) return;
    const body = settings();
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
    if (!valid()) return;  // before the message is taken from its box: it stays there to send again
    const input = form.querySelector("#input");
    const text = input.value;
    input.value = "";
    const part = await attachment();
    if (!part) { turn(text, text); return; }
    const shown = text + " [" + (part.type === "input_image" ? "image" : part.filename) + "]";
    turn([{ role: "user", content: [{ type: "input_text", text: text }, part] }], shown);
  }

  function showCode() {
    if (!valid()) return;
    const body = request();
    body.stream = true;
    // An MCP server's token stays out of code that is copied, pasted and shown: "..." as the key is.
    for (const tool of body.tools || []) if (tool.authorization) tool.authorization = "...";
    const json = JSON.stringify(body, null, 2);
    const args = Object.entries(body).map(([key, value]) => "    " + key + "=" + JSON.stringify(value).replace(/\btrue\b/g, "True")
      .replace(/\bfalse\b/g, "False").replace(/\bnull\b/g, "None") + ",").join("\n");
    code.textContent = "from openai import OpenAI\n\nclient = OpenAI(base_url=\"" + location.origin + "/v1\", api_key=\"...\")\n" +
      "for event in client.responses.create(\n" + args + "\n):\n    print(event)\n\n" +
      "curl " + location.origin + "/v1/responses -H 'content-type: application/json' -H 'authorization: Bearer ...' \\\n  -d '" +
      json.replace(/'/g, "'\\''") + "'";
    code.hidden = false;
  }

  playgroundTools.wire(form);
  form.addEventListener("submit", send);
  document.getElementById("reset").addEventListener("click", () => { previous = null; conversation.textContent = ""; stats.textContent = ""; });
  document.getElementById("show-code").addEventListener("click", showCode);
})();
