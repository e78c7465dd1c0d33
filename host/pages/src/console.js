"use strict";
// Each button posts its card's fields (data-post, as the page was served),
// its decision and, where the card asks for one, the reason typed; what
// the server answers is shown as text.
(() => {
  const { decide } = JSON.parse(document.getElementById("bl-console").textContent);
  document.querySelectorAll("button[data-decision]").forEach((button) => {
    button.addEventListener("click", async () => {
      const card = button.closest("section.approval");
      const outcome = card.querySelector(".outcome");
      const reason = card.querySelector("input.reason");
      card.querySelectorAll("button").forEach((b) => { b.disabled = true; });
      const asked = Object.assign(JSON.parse(card.dataset.post), { decision: button.dataset.decision });
      if (reason) asked.reason = reason.value;
      try {
        const answer = await fetch(decide, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify(asked),
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
