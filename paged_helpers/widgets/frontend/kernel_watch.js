// KernelWatch: an empty widget that turns into a warning when its kernel is gone.
// It also hides the static pictures that sit beside live widgets (display.py's ShowsItself):
// while a live view is on the page, the picture would show the same thing a second time.
const SNAPSHOT_STYLE_ID = "ph-static-snapshot-hiding";

function hideSnapshots(css) {
  if (!css || document.getElementById(SNAPSHOT_STYLE_ID)) return;
  const style = document.createElement("style");
  style.id = SNAPSHOT_STYLE_ID;
  style.textContent = css;
  document.head.append(style);
}

function render({ model, el }) {
  hideSnapshots(model.get("snapshot_hiding_css"));
  const banner = makeBanner();
  banner.style.fontSize = "max(1em, 14px)";
  el.classList.add("ph-kernel-watch");
  el.append(banner);
  const stop = watchKernel(el, model, (gone) => {
    banner.textContent = KERNEL_GONE;
    banner.hidden = !gone;
  });
  return stop;
}

export default { render };
