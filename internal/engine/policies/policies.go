// Package policies wires the loop's production policies into an
// engine.Config. cmd/loop, the engine's tests of those policies and the
// engine benchmark all call Wire, so what they run is what ships.
//
// The policies live in packages of their own beside the engine (plan,
// agenttools, compaction, tokens, stuckguard) and import it; the engine
// cannot import them back, so their wiring lives here.
package policies

import (
	"github.com/clawfarm/clawfarm/internal/engine"
	"github.com/clawfarm/clawfarm/internal/engine/agenttools"
	"github.com/clawfarm/clawfarm/internal/engine/compaction"
	"github.com/clawfarm/clawfarm/internal/engine/hooks"
	"github.com/clawfarm/clawfarm/internal/engine/plan"
	"github.com/clawfarm/clawfarm/internal/engine/stuckguard"
	"github.com/clawfarm/clawfarm/internal/engine/tokens"
	"github.com/clawfarm/clawfarm/internal/state"
)

// Wire gives cfg the production policies over the rig's state directory dir:
//
//   - the plan: update_progress, the plan and scratchpad pinned to every
//     request, the plan gate and the step watchdog;
//   - the state tools (memory, logs, jobs, wait) and, when there are skills,
//     Skill, with the skills' index as cfg.ExtraSystem;
//   - compaction (the fold policy and the oversized-result truncator), the
//     calibrated token estimator and the stuck guard.
//
// It builds on what cfg already holds: a nil cfg.State becomes a fresh one
// (a resumed session passes its snapshot's), cfg.Hooks (the deny-list) stays
// first in the hook chain, the plan is appended to cfg.Observers, and
// cfg.Clock is the state tools' clock; a cfg.Compactor already set (a
// compaction.Policy with the run's fold cadence) is kept. A snapshot writer, when the caller
// keeps one, is appended to cfg.Observers after Wire.
func Wire(cfg *engine.Config, dir *state.Dir, skills []state.Skill) error {
	if cfg.State == nil {
		cfg.State = &engine.State{}
	}
	st := cfg.State
	pl := plan.New(st)
	reg := engine.NewRegistry()
	if err := reg.Register(pl.Tool()); err != nil {
		return err
	}
	if err := (&agenttools.Tools{Dir: dir, Clock: cfg.Clock, Skills: skills}).Register(reg); err != nil {
		return err
	}
	cfg.Tools = reg
	cfg.Pinned = pl
	cfg.ExtraSystem = agenttools.SkillIndex(skills)
	if cfg.Compactor == nil { // the caller may have chosen a fold cadence
		cfg.Compactor = compaction.Policy{}
	}
	cfg.Estimator = tokens.NewEMA()
	chain := hooks.Chain{pl, compaction.Truncator{}, stuckguard.New(st)}
	if cfg.Hooks != nil {
		chain = append(hooks.Chain{cfg.Hooks}, chain...)
	}
	cfg.Hooks = chain
	cfg.Observers = append(cfg.Observers, pl)
	return nil
}
