package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"
)

// MinPeriodicGap is how close two runs of a periodic job may be.
const MinPeriodicGap = 30 * time.Minute

// Job kinds and statuses.
const (
	KindOneTime  = "one-time"
	KindPeriodic = "periodic"

	JobActive = "active"
	JobDone   = "done"
	JobFail   = "fail"
	JobCancel = "cancel"
)

// Job is an agent-created job as the state directory keeps it.
type Job struct {
	ID          string    `json:"id"`
	Kind        string    `json:"kind"`
	Schedule    string    `json:"schedule"`
	Description string    `json:"description"`
	Context     string    `json:"context,omitempty"`
	Status      string    `json:"status"`
	Created     time.Time `json:"created"`
	NextRun     time.Time `json:"nextRun,omitempty"`
	Finished    time.Time `json:"finished,omitempty"`
	Recap       string    `json:"recap,omitempty"`
}

type jobsFile struct {
	Jobs []Job `json:"jobs"`
}

// A job id becomes part of a CronJob name and a label value: lower-case letters, digits and dashes.
var jobID = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)

// NewJob is what create_job asks for.
type NewJob struct {
	ID, Kind, Schedule, Description, Context string
}

// CreateJob checks and records a new job. A one-time job names one minute
// (M H D Mon *) in the future; a periodic job fires at least MinPeriodicGap apart.
func (d *Dir) CreateJob(now time.Time, n NewJob) (Job, error) {
	n.ID = strings.TrimSpace(n.ID)
	if !jobID.MatchString(n.ID) {
		return Job{}, fmt.Errorf("create_job: id %q must be 1-40 lower-case letters, digits and dashes, starting and ending with a letter or digit", n.ID)
	}
	if n.Kind == "" {
		n.Kind = KindOneTime
	}
	if n.Kind != KindOneTime && n.Kind != KindPeriodic {
		return Job{}, fmt.Errorf("create_job: kind %q is neither one-time nor periodic", n.Kind)
	}
	if strings.TrimSpace(n.Description) == "" {
		return Job{}, errors.New("create_job: the description is empty")
	}
	c, err := ParseCron(n.Schedule)
	if err != nil {
		return Job{}, fmt.Errorf("create_job: %v", err)
	}
	switch n.Kind {
	case KindOneTime:
		if !single(c.expr, 0) || !single(c.expr, 1) || !single(c.expr, 2) || !single(c.expr, 3) || strings.Fields(c.expr)[4] != "*" {
			return Job{}, fmt.Errorf("create_job: a one-time schedule names one minute, \"M H D Mon *\" in UTC (e.g. \"30 14 2 12 *\"); %q does not", n.Schedule)
		}
	case KindPeriodic:
		if a, b, ok := c.closest(now); ok && b.Sub(a) < MinPeriodicGap {
			return Job{}, fmt.Errorf("create_job: periodic schedule %q fires at %s and again at %s, %s apart; periodic jobs must be at least %s apart: "+
				"fire at fewer minutes or hours (e.g. \"0 * * * *\" is hourly, \"0,30 9 * * *\" is 9:00 and 9:30)",
				n.Schedule, clock(a, a), clock(a, b), b.Sub(a), MinPeriodicGap)
		}
	}
	next, ok := c.Next(now)
	if !ok {
		return Job{}, fmt.Errorf("create_job: schedule %q never fires", n.Schedule)
	}
	if n.Kind == KindOneTime && next.Sub(now) > 366*24*time.Hour {
		return Job{}, fmt.Errorf("create_job: one-time schedule %q fires more than a year from now (%s)", n.Schedule, next.Format(time.RFC3339))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	f, err := d.readJobs()
	if err != nil {
		return Job{}, err
	}
	for _, j := range f.Jobs {
		if j.ID == n.ID && j.Status == JobActive {
			return Job{}, fmt.Errorf("create_job: job %q already exists and is active; finish_job it first or pick another id", n.ID)
		}
	}
	j := Job{ID: n.ID, Kind: n.Kind, Schedule: c.expr, Description: strings.TrimSpace(n.Description), Context: n.Context,
		Status: JobActive, Created: now.UTC(), NextRun: next}
	kept := f.Jobs[:0]
	for _, old := range f.Jobs {
		if old.ID != n.ID {
			kept = append(kept, old)
		}
	}
	f.Jobs = append(kept, j)
	return j, d.writeJobs(f)
}

// GetJob returns a job by id.
func (d *Dir) GetJob(id string) (Job, error) {
	f, err := d.readJobs()
	if err != nil {
		return Job{}, err
	}
	for _, j := range f.Jobs {
		if j.ID == id {
			return j, nil
		}
	}
	return Job{}, fmt.Errorf("no job %q; list_jobs shows the jobs", id)
}

// ListJobs returns the jobs with the given status ("" or "all": every job), by id.
func (d *Dir) ListJobs(status string) ([]Job, error) {
	switch status {
	case "", "all", JobActive, JobDone, JobFail, JobCancel:
	default:
		return nil, fmt.Errorf("list_jobs: status %q is not one of active, done, fail, cancel, all", status)
	}
	f, err := d.readJobs()
	if err != nil {
		return nil, err
	}
	var out []Job
	for _, j := range f.Jobs {
		if status == "" || status == "all" || j.Status == status {
			out = append(out, j)
		}
	}
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out, nil
}

// FinishJob marks an active job done, failed or cancelled.
func (d *Dir) FinishJob(now time.Time, id, status, recap string) (Job, error) {
	if status != JobDone && status != JobFail && status != JobCancel {
		return Job{}, fmt.Errorf("finish_job: status %q is not one of done, fail, cancel", status)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	f, err := d.readJobs()
	if err != nil {
		return Job{}, err
	}
	for i, j := range f.Jobs {
		if j.ID != id {
			continue
		}
		if j.Status != JobActive {
			return Job{}, fmt.Errorf("finish_job: job %q is already %s", id, j.Status)
		}
		j.Status, j.Finished, j.Recap = status, now.UTC(), recap
		f.Jobs[i] = j
		return j, d.writeJobs(f)
	}
	return Job{}, fmt.Errorf("finish_job: no job %q; list_jobs shows the jobs", id)
}

func (d *Dir) readJobs() (jobsFile, error) {
	var f jobsFile
	b, err := os.ReadFile(d.Path("jobs.json"))
	if errors.Is(err, os.ErrNotExist) {
		return f, nil
	}
	if err != nil {
		return f, fmt.Errorf("read jobs: %w", err)
	}
	if err := json.Unmarshal(b, &f); err != nil {
		return f, fmt.Errorf("jobs.json is damaged: %w", err)
	}
	return f, nil
}

func (d *Dir) writeJobs(f jobsFile) error {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := WriteFileAtomic(d.Path("jobs.json"), b); err != nil {
		return fmt.Errorf("write jobs: %w", err)
	}
	return nil
}
