// A background response's events, followed as they are logged (GET /v1/responses/{id}?stream=true
// through the console, as the signed-in principal), each with the time it reached the page.
"use strict";
(async function () {
  const table = document.getElementById("events");
  if (!table) return;
  const started = performance.now();
  const response = await fetch("/console/api/responses/" + encodeURIComponent(table.dataset.responseId) + "/events",
                               { credentials: "same-origin" });
  if (!response.ok || !response.body) { table.insertAdjacentText("afterend", "Error " + response.status); return; }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  let count = 0;
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
      const row = table.insertRow();
      for (const text of [String(payload.sequence_number ?? count), "+" + Math.round(performance.now() - started) + " ms",
                          payload.type, JSON.stringify(payload).slice(0, 300)]) {
        row.insertCell().textContent = text;
      }
      count += 1;
      if (payload.response && payload.response.status) document.getElementById("status").textContent = payload.response.status;
    }
  }
})();
