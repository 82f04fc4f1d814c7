// KernelWatch: an empty widget that turns into a warning when its kernel is gone.
function render({ model, el }) {
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
