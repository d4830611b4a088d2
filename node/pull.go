package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/llmswarm/llmswarm/answer"
	"github.com/llmswarm/llmswarm/client"
	"github.com/llmswarm/llmswarm/shards"
)

// pullLocks serializes pulls into the same file: two would write one
// partial file.
var pullLocks sync.Map // destination path -> *sync.Mutex

// diskMargin is the space a pull leaves free beyond the file.
const diskMargin = 256 << 20

// Pull fetches a model from the model hub (config hub) into the data
// dir's models/hub/OWNER/REPO/, checks it against the hub's sha256,
// registers it in the model store under its root CID and announces it in
// the DHT, so that peers fetch its layers from this one. It loads nothing:
// `role add` or `shard add` does. token, when set, replaces hub.token for
// this pull. on, when not nil, sees the pull's task as it progresses.
//
// A short name without a quant takes the best quant that fits what is
// left of this peer's memory budget. Pulling what the peer already has
// downloads nothing and says so (Already).
func (n *Node) Pull(ctx context.Context, model, token string, on func(client.Task)) (client.Pulled, error) {
	n.mu.Lock()
	p := n.pipe
	n.mu.Unlock()
	if p == nil || n.Swarm() == nil {
		return client.Pulled{}, ErrNotRunning
	}
	ref, short, err := shards.ParseModelRef(strings.TrimSpace(model))
	if err != nil {
		return client.Pulled{}, badRequest("%v", err)
	}
	if token == "" {
		token = n.cfg.Hub.Token
	}
	hub := &shards.Hub{Endpoint: n.cfg.Hub.Endpoint, Token: token}
	t := n.tasks.startWatched("pull", model, "bytes", 0, on)
	out, err := n.pull(ctx, p.store, hub, ref, short, model, t)
	t.finish(err)
	if err != nil {
		return client.Pulled{}, pullError(err)
	}
	n.log.Info("model pulled", "model", model, "path", out.Path, "cid", out.CID, "already", out.Already)
	return out, nil
}

func (n *Node) pull(ctx context.Context, st *shards.Store, hub *shards.Hub, ref shards.HubRef, short bool, model string, t *task) (client.Pulled, error) {
	t.update("resolve", 0, 0)
	files, err := hub.Files(ctx, ref)
	if err != nil {
		return client.Pulled{}, err
	}
	var f shards.HubFile
	if short {
		mem := n.mem.status()
		free := int64(0)
		if mem.MaxBytes > 0 {
			free = max(mem.MaxBytes-mem.UsedBytes, 1)
		}
		f, err = shards.PickFitting(files, ref, free)
	} else {
		f, err = shards.PickFile(files, ref)
	}
	if err != nil {
		return client.Pulled{}, err
	}
	dir := filepath.Join(st.Dir(), "hub", filepath.FromSlash(ref.Repo), filepath.Dir(filepath.FromSlash(f.Path)))
	dst := filepath.Join(dir, filepath.Base(f.Path))
	mu, _ := pullLocks.LoadOrStore(dst, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	defer mu.(*sync.Mutex).Unlock()
	out := client.Pulled{Model: model, Repo: ref.Repo, File: f.Path, Quant: shards.QuantOf(f.Path), Path: dst, Size: f.Size, SHA256: f.SHA256}
	if shards.HaveDownload(dst, f) {
		out.Already = true
		t.update("verify", f.Size, f.Size)
	} else {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return out, err
		}
		have := int64(0)
		if st, err := os.Stat(dst + ".partial"); err == nil {
			have = st.Size()
		}
		if free, ok := shards.DiskFree(dir); ok && f.Size-have+diskMargin > free {
			return out, answer.Errorf(answer.NoStorage, "%s is %s; %s has %s free (a pull leaves %s): free some space or move data_dir",
				f.Path, ByteSize(f.Size), dir, ByteSize(free), ByteSize(diskMargin))
		}
		t.update("download", have, f.Size)
		err := hub.Download(ctx, ref, f, dst, func(done, total int64) { t.update("download", done, total) })
		if err != nil {
			return out, err
		}
		if err := shards.RecordDownload(dst, f); err != nil {
			return out, err
		}
	}
	t.update("register", f.Size, f.Size)
	e, err := st.AddModel(dst)
	if err != nil {
		return out, fmt.Errorf("%s: %w", dst, err)
	}
	out.CID, out.Arch, out.Name, out.Layers = e.CID, e.Arch, e.Name, e.Layers
	return out, nil
}

// pullError says which kind of failure a failed pull is.
func pullError(err error) error {
	var known *answer.Error
	switch {
	case errors.As(err, &known):
		return err
	case errors.Is(err, context.Canceled):
		return answer.Wrap(answer.Cancelled, err)
	case errors.Is(err, shards.ErrHubNotFound):
		return answer.Wrap(answer.ModelNotFound, err)
	case errors.Is(err, shards.ErrHubAmbiguous):
		return answer.Wrap(answer.BadRequest, err)
	case errors.Is(err, shards.ErrHubTooBig):
		return answer.Wrap(answer.NoMemory, err)
	case errors.Is(err, shards.ErrHubAuth):
		return answer.Wrap(answer.HubAuth, err)
	case errors.Is(err, shards.ErrHubHash):
		return answer.Wrap(answer.HubCorrupt, err)
	case errors.Is(err, shards.ErrNotFullModel):
		return answer.Wrap(answer.NotAModel, err)
	}
	return answer.Wrap(answer.HubFailed, err)
}

// storedModels are the full models in st, provided in the DHT
// (swarm.WithStored) so that peers fetching their layers find this one.
func storedModels(st *shards.Store) func() []string {
	return func() []string {
		models, _ := st.List()
		out := make([]string, 0, len(models))
		for _, m := range models {
			out = append(out, m.CID)
		}
		return out
	}
}
