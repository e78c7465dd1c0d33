"use strict";
// Each button posts its node, its decision and the request digest this
// page was served with; what the server answers is shown as text.
(() => {
  const { decide } = JSON.parse(document.getElementById("bl-console").textContent);
  document.querySelectorAll("button[data-decision]").forEach((button) => {
    button.addEventListener("click", async () => {
      const card = button.closest("section.approval");
      const outcome = card.querySelector(".outcome");
      card.querySelectorAll("button").forEach((b) => { b.disabled = true; });
      try {
        const answer = await fetch(decide, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({
            node: card.dataset.node,
            decision: button.dataset.decision,
            request_digest: card.dataset.request,
          }),
        });
        outcome.textContent = await answer.text();
        card.dataset.outcome = answer.ok ? "recorded" : "refused";
      } catch (e) {
        outcome.textContent = "the console could not be reached: " + e;
        card.dataset.outcome = "refused";
      }
    });
  });
  document.body.dataset.ready = "true";
})();
