//! How a planned batch is spread over threads: the estimated work of each view
//! (values written, resize multiply-adds, decoded bytes) and the
//! [`ThreadPlan`] that follows from it.

use super::BatchPlan;
use crate::config::PillowCompat;
use crate::geometry::ResizeConfig;
use crate::image::ImageView;

/// Multiply-adds of Pillow's BICUBIC resize of `ch` channels from `w x h` to
/// `nw x nh`, estimated: an axis resampled from `n` to `m` samples takes about
/// `4 n / m + 1` taps per output sample (support 2, scaled by `n / m` when
/// down-scaling); an unchanged axis is not resampled. Horizontal pass first
/// unless `vertical_first` (the two orders differ only in the intermediate's size).
fn resize_macs(w: u64, h: u64, nw: u64, nh: u64, ch: u64, vertical_first: bool) -> u64 {
    let taps = |n: u64, m: u64| 4 * n.max(m) / m.max(1) + 1;
    let horizontal = |rows: u64| {
        if w == nw {
            0
        } else {
            rows.saturating_mul(nw).saturating_mul(taps(w, nw))
        }
    };
    let vertical = |columns: u64| {
        if h == nh {
            0
        } else {
            columns.saturating_mul(nh).saturating_mul(taps(h, nh))
        }
    };
    let passes = if vertical_first {
        vertical(w).saturating_add(horizontal(nh))
    } else {
        horizontal(h).saturating_add(vertical(nw))
    };
    passes.saturating_mul(ch)
}

/// Estimated pixel work of one view of a planned batch (sized `r`, `values`
/// output values), in units of about one output value written: its values (pad, normalise,
/// patchify: memory-bound, a fraction of a nanosecond each on one core) plus
/// half a unit per multiply-add of its resize when it is resized (the
/// exact integer kernels run about two multiply-adds in the time of one value
/// written), plus its decode for an encoded view. A pure function of the
/// view's size, its sizing and its header.
fn view_work(image: &ImageView<'_>, r: &ResizeConfig, values: usize, compat: PillowCompat) -> u64 {
    let (w, h) = (image.width as u64, image.height as u64);
    let (nw, nh) = (r.new_width, r.new_height);
    let resized = (nw, nh) != (w, h);
    let macs = if resized {
        let vertical_first = crate::resize::vertical_first(
            compat,
            image.width,
            image.height,
            nw as usize,
            nh as usize,
        );
        resize_macs(w, h, nw, nh, image.channels as u64, vertical_first)
    } else {
        0
    };
    // An encoded view is decoded first: about two units per decoded byte (a
    // photo's JPEG decode takes about as long as its whole resize).
    let decoded = match image.encoded {
        Some(header) => (header.width as u64)
            .saturating_mul(header.height as u64)
            .saturating_mul(header.channels as u64),
        None => 0,
    };
    (values as u64)
        .saturating_add(macs / 2)
        .saturating_add(decoded.saturating_mul(2))
}

/// Which parts of a planned batch run on the pool: `pool` when the call uses
/// it at all (more than one thread asked for, and the batch's work is at least
/// [`MIN_PARALLEL_WORK`](crate::par::MIN_PARALLEL_WORK)), then `views[k]` when
/// view `k` also splits its own resize bands and patch rows (its own work is
/// at least that much). Smaller images of a pooled batch run whole, one per
/// task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ThreadPlan {
    pub(super) pool: bool,
    pub(super) views: Vec<bool>,
}

/// The [`ThreadPlan`] of a planned batch run with `threads` threads: a pure
/// function of the views' sizes, their sizing and the pass order.
pub(super) fn thread_plan(
    images: &[ImageView<'_>],
    plan: &BatchPlan,
    compat: PillowCompat,
    threads: usize,
) -> ThreadPlan {
    let min = crate::par::MIN_PARALLEL_WORK;
    let works: Vec<u64> = images
        .iter()
        .zip(&plan.resize_configs)
        .enumerate()
        .map(|(k, (image, r))| view_work(image, r, plan.offsets[k + 1] - plan.offsets[k], compat))
        .collect();
    let total = works.iter().fold(0u64, |a, &b| a.saturating_add(b));
    let pool = threads > 1 && total >= min;
    ThreadPlan {
        pool,
        views: works.iter().map(|&w| pool && w >= min).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::MediaProcConfig;
    use crate::pipeline::{plan_batch, BatchItem, BatchPlan};

    #[test]
    fn resize_work_counts_the_taps_of_each_pass() {
        // 8000^2 -> 3584^2 (K3): 9 taps per output sample on each axis.
        let h_first = 8000 * 3584 * 9 + 3584 * 3584 * 9;
        assert_eq!(resize_macs(8000, 8000, 3584, 3584, 3, false), 3 * h_first);
        let v_first = 8000 * 3584 * 9 + 3584 * 3584 * 9;
        assert_eq!(resize_macs(8000, 8000, 3584, 3584, 1, true), v_first);
        // One axis only; no change at all; an up-scale counts 5 taps.
        assert_eq!(resize_macs(100, 50, 60, 50, 1, false), 50 * 60 * 7);
        assert_eq!(resize_macs(100, 50, 100, 25, 4, false), 4 * 100 * 25 * 9);
        assert_eq!(resize_macs(100, 50, 100, 50, 3, true), 0);
        assert_eq!(resize_macs(10, 10, 20, 10, 1, false), 10 * 20 * 5);
    }

    #[test]
    fn small_calls_stay_on_the_calling_thread() {
        let k3 = MediaProcConfig::kimi_k3();
        let compat = PillowCompat::V13;
        let pixels = vec![0u8; 8000 * 8000 * 3];
        let view = |w: usize, h: usize| ImageView::new(&pixels[..w * h * 3], w, h, 3).unwrap();
        let plan_of = |views: &[ImageView<'_>]| -> BatchPlan {
            let items: Vec<_> = views.iter().copied().map(BatchItem::Image).collect();
            plan_batch(&items, &k3).unwrap()
        };
        let decide = |views: &[ImageView<'_>], threads: usize| {
            thread_plan(views, &plan_of(views), compat, threads)
        };
        let serial = |n: usize| ThreadPlan {
            pool: false,
            views: vec![false; n],
        };
        // 1920x1080, not resized: 1932x1092 padded, 6.3 M values, under the threshold.
        let hd = view(1920, 1080);
        let plan = plan_of(&[hd]);
        assert_eq!(
            view_work(&hd, &plan.resize_configs[0], plan.total_values(), compat),
            6_329_232
        );
        assert_eq!(decide(&[hd], 2), serial(1));
        assert_eq!(decide(&[view(512, 600)], 8), serial(1));
        // 2212x1260 padded (158 x 90 patches): 8.36 M values, over it.
        let over = view(2200, 1240);
        let one = |parallel: bool| ThreadPlan {
            pool: parallel,
            views: vec![parallel],
        };
        assert_eq!(decide(&[over], 2), one(true));
        assert_eq!(decide(&[over], 1), one(false));
        // Two images under it, together over it: images in parallel, each whole.
        let pair = ThreadPlan {
            pool: true,
            views: vec![false, false],
        };
        assert_eq!(decide(&[hd, hd], 2), pair);
        assert_eq!(decide(&[hd, hd], 1), serial(2));
        // A big image and a small one: the big one splits its bands too.
        let big = view(8000, 8000);
        let mixed = ThreadPlan {
            pool: true,
            views: vec![true, false],
        };
        assert_eq!(decide(&[big, view(300, 200)], 3), mixed);
        // The resize is counted: 8000^2 -> 3586^2 is 1.1 G multiply-adds.
        let plan = plan_of(&[big]);
        let r = plan.resize_configs[0];
        assert_eq!((r.new_width, r.new_height), (3586, 3586));
        let values = plan.total_values();
        assert_eq!(
            view_work(&big, &r, values, compat),
            values as u64 + resize_macs(8000, 8000, 3586, 3586, 3, false) / 2
        );
        // A view already of its sizing's size is not resized.
        let small = view(3586, 3586);
        assert_eq!(view_work(&small, &r, values, compat), values as u64);
    }
}
