// Package trainer will own the offline CLEAR pipeline over the replay buffer:
// contrastive reflection, SFT data and LLaMA-Factory runs, GRPO with veRL, rollouts and
// reports (issues 6 and 7). It is empty until then.
package trainer
