// The exported story: every frame is a <section class="ph-slide">, one shown at a time.
(() => {
  const stage = document.querySelector(".ph-story-stage");
  const content = stage.querySelector(".ph-story-content");
  const slides = [...content.querySelectorAll(".ph-slide")];
  let current = 0;
  const show = (index) => {
    current = Math.max(0, Math.min(slides.length - 1, index));
    slides.forEach((slide, i) => (slide.hidden = i !== current));
    history.replaceState(null, "", `#step-${current}`);
    fitText(stage, content);
  };
  document.addEventListener("keydown", (event) => {
    const action = keyAction(event);
    if (!action || action === "leave") return;
    event.preventDefault();
    const target = { next: current + 1, back: current - 1, restart: 0, end: slides.length - 1 }[action];
    show(target);
  });
  // A click on the right half goes on, on the left half goes back (a mouse as a clicker).
  stage.addEventListener("click", (event) => show(current + (event.clientX > innerWidth / 2 ? 1 : -1)));
  addEventListener("resize", () => fitText(stage, content));
  // #step-N opens step N (a link to one step; reloading keeps the place).
  const fromHash = () => {
    const asked = /^#step-(\d+)$/.exec(location.hash);
    return asked ? Number(asked[1]) : 0;
  };
  addEventListener("hashchange", () => show(fromHash()));
  show(fromHash());
})();
